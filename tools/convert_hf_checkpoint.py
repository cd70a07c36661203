"""Convert a Hugging Face BERT folder (safetensors) to Google's checkpoint layout.

  python -m tools.convert_hf_checkpoint HF_DIR OUTPUT_DIR

HF_DIR holds config.json, model.safetensors, and vocab.txt or tokenizer.json: a
BertModel, or a BertForSequenceClassification with its head. OUTPUT_DIR receives bert_config.json,
bert_model.ckpt.* and vocab.txt, and flags.txt with the run flags that use them
(--bert_config_file, --vocab_file, --init_checkpoint, the casing, and for a classifier
its head kind and its labels in order): pass --flagfile=OUTPUT_DIR/flags.txt.
"""

import argparse
import os
import sys

from modeling.convert_hf import ConversionError, convert


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
  parser.add_argument("hf_dir", help="folder with config.json, model.safetensors, vocab.txt")
  parser.add_argument("output_dir", help="where to write the Google-layout checkpoint")
  args = parser.parse_args(argv)
  try:
    config, prefix, head = convert(args.hf_dir, args.output_dir)
  except ConversionError as e:
    sys.stderr.write("convert_hf_checkpoint: %s\n" % e)
    return 1
  except OSError as e:  # a folder that cannot be read or written: a full disk, no permission
    sys.stderr.write("convert_hf_checkpoint: %s: %s\n" % (e.filename or args.output_dir,
                                                          e.strerror or e))
    return 1
  print("wrote %s (%d layers, hidden %d, vocab %d, hidden_act %s%s)" % (
      prefix, config.num_hidden_layers, config.hidden_size, config.vocab_size,
      config.hidden_act, "; a %s head over %s" % (head[0], ", ".join(head[1])) if head else
      "; an encoder without a head"))
  print("run with: python run_classifier.py --flagfile=%s ..." % os.path.join(
      args.output_dir, "flags.txt"))
  return 0


if __name__ == "__main__":
  sys.exit(main())
