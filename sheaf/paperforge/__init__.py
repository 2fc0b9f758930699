"""PaperForge's Obsidian plugin, answered by Sheaf: `python -m sheaf.paperforge --vault V ...`
(and the `sheaf-paperforge-python` launcher) parses the plugin's commands (`commands`) and
shapes Sheaf's answers the way the plugin reads them (`shapes`: its envelopes, probes and build
stream). The top layer: it calls the CLI's parsing helpers, the servers' client and the
service layer.
"""
