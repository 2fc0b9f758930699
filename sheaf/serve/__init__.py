"""The servers: `sheaf serve` (HTTP on the loopback, engines kept warm: `server`), the client
that the CLI and the PaperForge entry use to reach it (`client`), and `sheaf mcp` (the Model
Context Protocol server and its result models: `mcp_server`). Above the service layer, whose
requests they answer, and below the CLI that starts them.
"""
