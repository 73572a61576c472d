"""`autotune check`: re-measure the chosen configuration of a best.yaml and decide, with its noise,
whether it regressed (regress), on the bench it rebuilds (bench), with the host's conditions
(conditions), the noise-aware decision that fails closed (stats), the verdict with its evidence
(verdict), the JUnit report (junit) and what it prints (views). It reads best.yaml through
autotune.documents and never imports the search.
"""
