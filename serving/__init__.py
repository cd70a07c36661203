"""Using an exported model: the in-process predictor. It reads data/ (tokenisation) and
spec/ (the export's contract and model card), and never modeling/: an export is enough."""
