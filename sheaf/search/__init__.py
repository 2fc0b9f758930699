"""Search layer: lexical, vector and hybrid retrieval, snippets, grep, the Retriever and its engines."""
