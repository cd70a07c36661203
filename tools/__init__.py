"""Entry points and helpers around run_classifier.py: assets, the demo, conversion, benchmarks."""
