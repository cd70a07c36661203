"""What the data side and the model side must agree on, in plain Python (no TensorFlow).

Both data/ and modeling/ may import this package; it imports neither.
"""
