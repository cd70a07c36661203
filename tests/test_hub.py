"""--bert_hub_module_handle: our encoder exported as a TF1 hub module gives the same logits."""

import sys
import types

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from conftest import THREE_CLASSES, small_config, write_small_vocab
from modeling.bert import BertModel
from modeling.head import head_logits
from modeling.model_fn import model_fn_builder



def _save_random_classifier(config, path, num_labels):
  with tf.Graph().as_default():
    ids = tf.zeros([1, 8], tf.int32)
    head_logits(BertModel(config, False, ids).get_pooled_output(), num_labels, False)
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      tf.train.Saver().save(session, path)


def _predict(config, checkpoint, hub_handle, features):
  with tf.Graph().as_default():
    model_fn = model_fn_builder(config, THREE_CLASSES, checkpoint, 1e-4, 0, 0, use_tpu=False,
                                hub_module_handle=hub_handle)
    spec = model_fn({k: tf.constant(v) for k, v in features.items()}, None,
                    tf.estimator.ModeKeys.PREDICT, {})
    with tf.Session() as session:
      session.run([tf.global_variables_initializer(), tf.tables_initializer()])
      return session.run(spec.predictions["outputs"])


def test_exported_hub_module_gives_the_same_logits(tmp_path):
  from modeling.hub_module import export_hub_module, tokenization_info
  config = small_config()
  checkpoint = str(tmp_path / "model.ckpt")
  _save_random_classifier(config, checkpoint, 3)
  vocab = write_small_vocab(str(tmp_path / "vocab.txt"), ["w%d" % i for i in range(94)])
  module_dir = export_hub_module(config, checkpoint, vocab, True, str(tmp_path / "module"))

  rng = np.random.RandomState(0)
  ids = rng.randint(0, config.vocab_size, (4, 12)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[2, 7:] = 0
  features = {"input_ids": ids, "input_mask": mask,
              "segment_ids": np.tile([0] * 6 + [1] * 6, (4, 1)).astype(np.int32),
              "label_ids": np.zeros(4, np.int32), "is_real_example": np.ones(4, np.int32),
              "example_id": np.arange(4, dtype=np.int32)}
  from_checkpoint = _predict(config, checkpoint, None, features)
  from_hub = _predict(config, checkpoint, module_dir, features)
  np.testing.assert_allclose(from_hub, from_checkpoint, atol=1e-6)
  assert np.abs(from_checkpoint - 1.0 / 3).max() > 1e-4  # not a degenerate uniform output

  vocab_file, do_lower_case = tokenization_info(module_dir)
  assert do_lower_case is True
  assert open(vocab_file).read() == open(vocab).read()


def test_clear_error_when_hub_cannot_load_tf1_modules(monkeypatch):
  from modeling import hub_module
  monkeypatch.setitem(sys.modules, "tensorflow_hub",
                      types.SimpleNamespace(__version__="0.16.1", KerasLayer=object))
  with pytest.raises(RuntimeError) as error:
    hub_module.hub_pooled_output("/some/module", {}, False)
  message = str(error.value)
  assert "tensorflow_hub 0.16.1 cannot load TF1-format hub modules" in message
  assert "tensorflow-hub<=0.15" in message and "--init_checkpoint" in message
