"""Predicting from an exported SavedModel in-process: loaded once, then texts in, labels and
probabilities out.

  from serving.predictor import Predictor
  predictor = Predictor("out/export/1700000000")      # or the training --output_dir
  predictor.predict(["you are great", "you are an idiot"])
  # [{'label': '0', 'probabilities': {'0': 0.97, '1': 0.03}}, ...]

The export alone is enough: its model card (assets/model_card.json) gives the labels,
the casing, max_seq_length and the truncation, and assets/vocab.txt the vocabulary. Texts
are tokenised as training tokenised them (the same exact shortcut and Google's ids), and
each batch is padded only to its longest text, with texts of similar length batched
together (serving/predicting.py, which the ONNX predictor shares).
"""

import logging

import tensorflow.compat.v1 as tf

from data.graph_tokenizer import text_ops
from serving.predicting import (EXPORT_AGAIN, ExportNotFound, ExportPredictor,
                                check_batch_size, check_export_files, find_export,
                                read_export_card)
from spec import signature

log = logging.getLogger(__name__)


class Predictor(ExportPredictor):
  """A SavedModel exported by run_classifier.py --do_export, loaded into its own session.

  path: the export (a directory with saved_model.pb) or a training --output_dir whose
  export/ holds one (the newest is taken). tokenizer: 'auto', 'fast' or 'python' (the
  same ids). batch_size: texts per session run.
  """

  # A session run costs about 12 ms plus 0.24 ms a padded token (MiniLM, 2 cores, runs of
  # 1 to 32 texts of 8 to 128 tokens): 50 tokens' worth.
  run_overhead_tokens = 50

  def __init__(self, path, tokenizer="auto", batch_size=32, session_config=None):
    check_batch_size(batch_size)  # (before an export's files are read and hashed)
    export_dir = find_export(path)
    check_export_files(export_dir)
    super(Predictor, self).__init__(read_export_card(export_dir), tokenizer, batch_size)
    self.export_dir = export_dir
    text_ops()  # (the export's text signature has ops of tensorflow_text's)
    self._graph = tf.Graph()
    self._session = tf.Session(graph=self._graph, config=session_config)
    try:
      meta_graph = tf.saved_model.load(self._session, [signature.SERVE_TAG],
                                       self.export_dir)
    except tf.errors.OpError as e:  # (files as listed, and still not a SavedModel TF loads)
      self._session.close()
      raise ExportNotFound("%s cannot be loaded (%s): %s" % (
          self.export_dir, e.message.splitlines()[0], EXPORT_AGAIN))
    served = meta_graph.signature_def[signature.ids_signature_of(meta_graph.signature_def)]
    self._inputs = {name: served.inputs[name].name for name in signature.INPUT_NAMES}
    self._output = served.outputs[self.output_name].name
    log.info("loaded %s: %s, max_seq_length %d", self.export_dir, self.label_spec.describe(),
             self.max_seq_length)

  def run_batch(self, batch):
    return self._session.run(self._output, {self._inputs[name]: batch[name]
                                            for name in signature.INPUT_NAMES})

  def close(self):
    self._session.close()
