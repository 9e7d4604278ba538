"""Jobs: a source (snapshot files, an archive) wired to an engine on an executor.

Everything that reads runs from somewhere, runs the ledger or the window engine
over them, or writes an archive lives here: ingest, what-if over a source, the
synthetic archive. The layers below (read, tables, ledger, window, archive) know
nothing of each other's callers.
"""
