"""The context ledger: per piece, what was offered, used and earned.

Kept free of imports: the command line reads :data:`DEFAULT_MIN_OFFERS` for its
``--min-offers`` default without loading Polars.
"""

#: The reference gate's default: below this many offers a piece is not judged.
DEFAULT_MIN_OFFERS = 5
