"""`gpupack report`: measure the GPU waste before changing anything, and prove the savings after (the guide's
(docs/method.md)
first and last steps). Sources -> one window's usage -> findings (pure) -> savings and before/after -> renderers."""
