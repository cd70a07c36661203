"""The vocabulary: read (ids are line numbers, as the model's embeddings are laid out),
checked as a BERT vocabulary (its special tokens once each, UTF-8 text), its casing told
from its tokens, its size against a BERT config, and its fingerprint for records and
model cards."""

import hashlib
import io
import logging
import re

from data.data_error import DataError

log = logging.getLogger(__name__)

UNK_TOKEN = "[UNK]"
CLS_TOKEN = "[CLS]"
SEP_TOKEN = "[SEP]"

# Checkpoint directory names as Google published them, and the casing each implies.
_KNOWN_UNCASED = ("uncased_L-24_H-1024_A-16", "uncased_L-12_H-768_A-12",
                  "multilingual_L-12_H-768_A-12", "chinese_L-12_H-768_A-12")
_KNOWN_CASED = ("cased_L-12_H-768_A-12", "cased_L-24_H-1024_A-16",
                "multi_cased_L-12_H-768_A-12")


# The tokens every example needs: a vocabulary without one is refused when read.
SPECIAL_TOKENS = (CLS_TOKEN, SEP_TOKEN, UNK_TOKEN)
# A vocabulary is cased when at least this share of its tokens hold a capital letter (the
# released cased vocabularies: about a quarter); uncased when none does.
CASED_SHARE = 0.01


def load_vocab(vocab_file, text=None):
  """Reads a one-token-per-line vocabulary: vocab_file's, or text, the file's contents read
  elsewhere (from a bucket). Returns {token: id}, each token's id its line's number from
  0: the row of the model's embeddings it was trained with (a token listed twice keeps its
  last line's, as Hugging Face's tokenizer reads it, and the log names both lines;
  bert-tensorflow's load_vocab would shift every later id by one). DataError for a file that is empty, not UTF-8, or lacks a token
  every example needs ([CLS], [SEP], [UNK])."""
  if text is None:
    text = read_vocab_text(vocab_file)
  vocab, first_line, blank_lines = {}, {}, []
  line = 0
  for line, token in enumerate((l.strip() for l in io.StringIO(text, newline=None)), 1):
    if token in vocab and token in SPECIAL_TOKENS + ("[PAD]", "[MASK]"):
      raise DataError(vocab_file, "the token %s is listed twice, on lines %d and %d: every "
                      "example's %s would read as another id than the model was trained "
                      "with" % (token, first_line[token], line, token),
                      "pass the vocab.txt that belongs to the checkpoint", line=line)
    if not token and line not in blank_lines:
      blank_lines.append(line)
    if token in vocab and token:
      log.warning("%s lists the token %r twice, on lines %d and %d: ids are line numbers "
                  "(rows of the model's embeddings), and the token reads as line %d's, as "
                  "Hugging Face's tokenizer reads it", vocab_file, token, first_line[token],
                  line, line)
    first_line.setdefault(token, line)
    vocab[token] = line - 1
  if not vocab:
    raise DataError(vocab_file, "the vocabulary file is empty",
                    "pass the vocab.txt that belongs to the checkpoint")
  if blank_lines:
    log.warning("%s: line%s %s %s blank, each read as a token no text gives (its id is its "
                "line's, so the ids after it stay the model's)", vocab_file,
                "s" if len(blank_lines) > 1 else "", ", ".join(map(str, blank_lines[:5])),
                "are" if len(blank_lines) > 1 else "is")
  missing = [token for token in SPECIAL_TOKENS if token not in vocab]
  if missing:
    raise DataError(vocab_file, "the vocabulary has no %s token, which every example needs "
                    "(its %d lines are not a BERT vocabulary)" % (" or ".join(missing), line),
                    "pass the vocab.txt that belongs to the checkpoint")
  return vocab


def read_vocab_text(vocab_file):
  """The text of a vocabulary file (local or in a bucket); DataError when it is not UTF-8
  or is no file."""
  from data.files import not_a_file_problem
  from data.gfile import FILE_ERRORS, gfile
  line = None
  try:
    problem = not_a_file_problem(vocab_file) if gfile.exists(vocab_file) else (
        "the file does not exist")
    if problem is None:
      with gfile.GFile(vocab_file, "rb") as f:
        return f.read().decode("utf-8")
  except UnicodeDecodeError as e:
    line = e.object.count(b"\n", 0, e.start) + 1
    problem = "the vocabulary is not UTF-8 text (byte 0x%02x)" % e.object[e.start]
  except FILE_ERRORS as e:
    problem = "it cannot be read (%s)" % str(getattr(e, "message", None) or e).strip(
        ).splitlines()[0]
  raise DataError(vocab_file, problem, "pass the vocab.txt that belongs to the checkpoint",
                  line=line)


def vocab_size(vocab):
  """The number of a vocabulary's lines: the rows of the embedding it indexes."""
  return max(vocab.values()) + 1


def vocab_casing(vocab):
  """'cased' when the vocabulary holds capitals (at least CASED_SHARE of its tokens, the
  [bracketed] special ones aside), 'uncased' when none of its tokens does, else None."""
  words = [t for t in vocab if not (t.startswith("[") and t.endswith("]"))]
  capitals = sum(1 for t in words if t != t.lower())
  if capitals == 0:
    return "uncased"
  return "cased" if capitals >= CASED_SHARE * len(words) else None


def casing_problem(vocab, vocab_file, do_lower_case):
  """What makes do_lower_case wrong for the vocabulary (a sentence ending in its fix), or
  None: lower-casing for a cased vocabulary leaves its capitalised tokens unused; keeping
  capitals for an uncased one turns capitalised words into pieces and [UNK]."""
  casing = vocab_casing(vocab)
  if do_lower_case and casing == "cased":
    example = next(t for t in vocab if t != t.lower() and not t.startswith("["))
    return ("%s is a cased vocabulary (tokens such as %r hold capitals), and "
            "--do_lower_case=True lower-cases every text, so the model would never see "
            "them. Pass --do_lower_case=False for a cased model, or the uncased model's "
            "vocab.txt" % (vocab_file, example))
  if not do_lower_case and casing == "uncased":
    return ("%s is an uncased vocabulary (none of its tokens holds a capital), and "
            "--do_lower_case=False keeps capitals, so every capitalised word would be split "
            "into pieces or read as [UNK]. Pass --do_lower_case=True for an uncased model"
            % vocab_file)
  return None


def vocab_fingerprint(vocab_file):
  """sha256 of the vocabulary file, recorded in feature-cache metadata."""
  from data.gfile import gfile
  digest = hashlib.sha256()
  with gfile.GFile(vocab_file, "rb") as f:
    digest.update(f.read())
  return digest.hexdigest()


def check_vocab_matches_config(vocab_file, vocab_size_of_config, config_file):
  """Raises DataError when the vocabulary and bert_config.json disagree on size."""
  size = vocab_size(load_vocab(vocab_file))
  if size != vocab_size_of_config:
    raise DataError(
        vocab_file,
        "the vocabulary has %d tokens but %s says vocab_size=%d" %
        (size, config_file, vocab_size_of_config),
        "use the vocab.txt shipped with the same checkpoint as the config "
        "(a cased and an uncased vocabulary, or two model families, are easy to mix up)")
  return size


def casing_mismatch_warning(do_lower_case, init_checkpoint):
  """Returns a warning string when do_lower_case contradicts a known checkpoint name, else None."""
  if not init_checkpoint:
    return None
  match = re.match(r"^.*?([A-Za-z0-9_-]+)/bert_model\.ckpt", init_checkpoint)
  if match is None:
    return None
  name = match.group(1)
  if name in _KNOWN_UNCASED and not do_lower_case:
    implied, flag = "uncased", "--do_lower_case=True"
  elif name in _KNOWN_CASED and do_lower_case:
    implied, flag = "cased", "--do_lower_case=False"
  else:
    return None
  return ("--do_lower_case=%s contradicts the checkpoint %s, which is %s. "
          "Pass %s, or the text will not match what the model was trained on." %
          (do_lower_case, name, implied, flag))


