"""The libraries researchers keep: a Zotero data directory (read while Zotero runs, never
written), a folder of PDFs, a PaperForge vault. Each is discovered as papers (`PaperSource`:
key, path) and metadata exports (`discover`), scanned for changes (`sources`), and mirrored
where a layout needs derived files (`mirror`, `zotero_mirror`: in the home, never the user's
folder). Reading a paper's file is `sheaf.formats`' job: this package may import it, never the
reverse.
"""
