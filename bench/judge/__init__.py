"""Judge stage: verdicts on result tables (the regression gate, its allow-list and outputs)
and what results decide (the ``algorithm: auto`` tuning table)."""
