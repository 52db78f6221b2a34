"""The side-by-side benchmark: load-generator agents, the systems measured, the lossless-rate
search, and JSON-lines results."""
