"""Arrow tables of runs: one schema (``schema``), a builder for every table (``build``).

Kept free of imports: the command line reads :data:`ACCOUNTING_MODES` for its
``--mode`` choices without loading PyArrow.
"""

#: The two accountings every table is built in: what each call was really sent and
#: used, and agentfootprint 9.62's own numbers, quirks included.
ACCOUNTING_MODES = ("corrected", "reference")
