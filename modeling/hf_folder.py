"""What a Hugging Face BERT folder's tokenizer files say: its vocabulary, and whether its
tokenization is Google's (the only one this project's models read), cased or uncased.

transformers 5 saves a tokenizer as tokenizer.json alone; earlier versions as vocab.txt and
tokenizer_config.json, often with tokenizer.json too. Whatever the folder holds is read,
and files that disagree, or settings Google's tokenizer has no counterpart of, are
refused: a model converted with another tokenization would read other ids, silently.
"""

import json
import os


class ConversionError(ValueError):
  """A checkpoint that cannot be converted exactly; the message names the tensor or file."""


# tokenizer_config.json's settings and the names tokenizer.json's BertNormalizer gives them.
NORMALIZER_FIELDS = {"do_lower_case": "lowercase", "strip_accents": "strip_accents",
                     "tokenize_chinese_chars": "handle_chinese_chars",
                     "clean_text": "clean_text"}
GOOGLES_TOKENIZER = ("Google's tokenizer, which this project's models read, cleans the text, "
                     "splits CJK characters and strips accents exactly when it lower-cases")


def json_of(hf_dir, name):
  """The JSON of hf_dir/name ({} when there is none); ConversionError for one that is not
  JSON or not UTF-8 text."""
  path = os.path.join(hf_dir, name)
  if not os.path.isfile(path):
    return {}
  with open(path, "rb") as f:
    try:
      return json.loads(f.read().decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
      raise ConversionError("%s is not valid JSON (%s)" % (path, e))


def _vocab_txt(hf_dir):
  """vocab.txt's tokens, one a line (as transformers reads them), or None."""
  path = os.path.join(hf_dir, "vocab.txt")
  if not os.path.isfile(path):
    return None
  with open(path, encoding="utf-8") as f:
    return [line.rstrip("\n") for line in f]


def _tokenizer_json_vocab(hf_dir):
  """The tokens of tokenizer.json's WordPiece model in the order of their ids, or None."""
  where = os.path.join(hf_dir, "tokenizer.json")
  if not os.path.isfile(where):
    return None
  model = json_of(hf_dir, "tokenizer.json").get("model") or {}
  vocab = model.get("vocab")
  if model.get("type") != "WordPiece" or not isinstance(vocab, dict):
    raise ConversionError("%s has no WordPiece vocabulary (its model is %s): a BERT folder "
                          "needs vocab.txt, or a tokenizer.json of a BERT tokenizer" % (
                              where, model.get("type")))
  tokens = sorted(vocab, key=vocab.get)
  if [vocab[token] for token in tokens] != list(range(len(tokens))):
    raise ConversionError("%s: the ids of its vocabulary are not 0 to %d, one token each" % (
        where, len(tokens) - 1))
  return tokens


def vocabulary(hf_dir):
  """The folder's tokens in the order of their ids: vocab.txt's, tokenizer.json's, and
  when it has both, they must be the same."""
  from_txt, from_json = _vocab_txt(hf_dir), _tokenizer_json_vocab(hf_dir)
  if from_txt is None and from_json is None:
    raise ConversionError("%s has neither vocab.txt nor tokenizer.json: the vocabulary of its "
                          "tokenizer is needed" % hf_dir)
  if from_txt is not None and from_json is not None and from_txt != from_json:
    differing = next((i for i, (a, b) in enumerate(zip(from_txt, from_json)) if a != b),
                     min(len(from_txt), len(from_json)))
    raise ConversionError(
        "%s: vocab.txt and tokenizer.json hold different vocabularies (%d and %d tokens; id "
        "%d is %r in one and %r in the other): keep the one the model was trained with" % (
            hf_dir, len(from_txt), len(from_json), differing,
            from_txt[differing] if differing < len(from_txt) else None,
            from_json[differing] if differing < len(from_json) else None))
  return from_txt if from_txt is not None else from_json


def tokenizer_settings(hf_dir):
  """{setting: value} that the folder states, from tokenizer_config.json and from
  tokenizer.json's normalizer; the two may not disagree."""
  stated = {}
  config = json_of(hf_dir, "tokenizer_config.json")
  for name in NORMALIZER_FIELDS:
    if config.get(name) is not None:
      stated[name] = (config[name], "tokenizer_config.json")
  normalizer = json_of(hf_dir, "tokenizer.json").get("normalizer")
  if normalizer is not None:
    if normalizer.get("type") != "BertNormalizer":
      raise ConversionError("%s: its normalizer is a %s, not a BertNormalizer. %s" % (
          os.path.join(hf_dir, "tokenizer.json"), normalizer.get("type"), GOOGLES_TOKENIZER))
    for name, field in NORMALIZER_FIELDS.items():
      value = normalizer.get(field)
      if value is None:
        continue
      if name in stated and stated[name][0] != value:
        raise ConversionError("%s: tokenizer_config.json says %s=%s and tokenizer.json's "
                              "normalizer %s=%s: correct the one that is wrong" % (
                                  hf_dir, name, stated[name][0], field, value))
      stated[name] = (value, "tokenizer.json")
  return {name: value for name, (value, _) in stated.items()}


def google_casing(hf_dir):
  """Whether the folder's tokenizer lower-cases (the default of transformers' BertTokenizer
  when it does not say), when it is Google's tokenization; else a ConversionError."""
  settings = tokenizer_settings(hf_dir)
  lower = settings.get("do_lower_case", True)
  if not isinstance(lower, bool):
    raise ConversionError("%s: do_lower_case is %r, not true or false" % (hf_dir, lower))
  refused = []
  if settings.get("strip_accents") not in (None, lower):
    refused.append("strips accents=%s while lower-casing=%s" % (settings["strip_accents"],
                                                                lower))
  for name in ("tokenize_chinese_chars", "clean_text"):
    if settings.get(name) is False:
      refused.append("%s=false" % name)
  if refused:
    raise ConversionError("%s: its tokenizer %s. %s: the model would read other ids here" % (
        hf_dir, " and ".join(refused), GOOGLES_TOKENIZER))
  return lower
