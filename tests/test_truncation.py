"""Truncation strategies (head, tail, head_tail) on real long comments and real pairs.

Every expectation is computed here from the whole text's ids, as Google's tokenizer path
gives them (tokenize, then convert_tokens_to_ids), never from the code under test.
"""

import pytest

from conftest import BINARY, TINY_VOCAB, sample_path
from data.features import (Truncation, TruncationCount, convert_example, convert_examples,
                           features_from_ids, pair_lengths, truncate_pair)
from data.processors import get_processor
from data.tokenization import FullTokenizer

CLS, SEP = 101, 102
LENGTHS = (16, 64, 128)
# head_tail with the default head (a quarter of the room), a small head, and a head that
# is longer than the room at 16 and 64 (head only there) but not at 128.
STRATEGIES = [Truncation("tail"), Truncation("head_tail"), Truncation("head_tail", 10),
              Truncation("head_tail", 100), Truncation("head_tail", 0)]
ALL_STRATEGIES = [Truncation()] + STRATEGIES


@pytest.fixture(scope="module")
def tokenizer():
  return FullTokenizer(TINY_VOCAB, do_lower_case=True)


@pytest.fixture(scope="module")
def jigsaw():
  return get_processor("csv", files={"train": sample_path("jigsaw_toxic_balanced",
                                                         "comments.csv")},
                       text_column="0", label_columns=["1"], has_header=False).get_examples("train")


@pytest.fixture(scope="module")
def mrpc():
  processor = get_processor("mrpc", data_dir=sample_path("glue", "MRPC"))
  return processor.get_examples("train") + processor.get_examples("dev")


def whole_ids(tokenizer, text):
  return tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text))


def expected_kept(ids, room, strategy):
  """The reference: which of a text's ids a strategy keeps in room slots."""
  if len(ids) <= room:
    return ids
  if strategy.mode == "head":
    return ids[:room]
  if strategy.mode == "tail":
    return ids[len(ids) - room:]
  head = room // 4 if strategy.head_tokens is None else min(strategy.head_tokens, room)
  return ids[:head] + ids[len(ids) - (room - head):]


def googles_pair_lengths(len_a, len_b, max_length):
  """Google's rule, step by step: one token at a time from the longer text (b on a tie)."""
  while len_a + len_b > max_length:
    if len_a > len_b:
      len_a -= 1
    else:
      len_b -= 1
  return len_a, len_b


def check_single(features, ids, max_seq_length):
  assert features.token_ids == [CLS] + ids + [SEP]
  assert features.num_first_segment == len(ids) + 2
  assert features.segment_ids == [0] * max_seq_length
  assert features.input_mask == [1] * (len(ids) + 2) + [0] * (max_seq_length - len(ids) - 2)


@pytest.mark.parametrize("max_seq_length", LENGTHS)
def test_long_comments_keep_the_ids_each_mode_says(tokenizer, jigsaw, max_seq_length):
  room = max_seq_length - 2
  whole = [whole_ids(tokenizer, e.text_a) for e in jigsaw]
  long_ones = [i for i, ids in enumerate(whole) if len(ids) > room]
  assert len(long_ones) >= 40  # real long comments, truncated at every length
  for strategy in ALL_STRATEGIES:
    fast = list(convert_examples(jigsaw, BINARY, max_seq_length, tokenizer, strategy=strategy))
    for i in long_ones:
      kept = expected_kept(whole[i], room, strategy)
      assert len(kept) == room
      check_single(fast[i], kept, max_seq_length)
      assert convert_example(jigsaw[i], i, BINARY, max_seq_length, tokenizer,
                             strategy).as_dict() == fast[i].as_dict()
      assert fast[i].label_id == int(jigsaw[i].label) and fast[i].example_id == i


def test_the_split_of_head_tail_in_numbers(tokenizer, jigsaw):
  """The documented rules on one long comment, spelled out."""
  example = max(jigsaw, key=lambda e: len(whole_ids(tokenizer, e.text_a)))
  ids = whole_ids(tokenizer, example.text_a)
  assert len(ids) > 300

  def kept(strategy, max_seq_length):
    return convert_example(example, 0, BINARY, max_seq_length, tokenizer,
                           strategy).token_ids[1:-1]

  assert kept(Truncation("head_tail"), 16) == ids[:3] + ids[-11:]  # 14 // 4 = 3 from the start
  assert kept(Truncation("head_tail"), 256) == ids[:63] + ids[-191:]  # 254 // 4 = 63
  assert kept(Truncation("head_tail", 128), 256) == ids[:128] + ids[-126:]
  assert kept(Truncation("head_tail", 14), 16) == ids[:14]  # head_tokens >= room: head only
  assert kept(Truncation("head_tail", 500), 16) == ids[:14]
  assert kept(Truncation("head_tail", 0), 16) == kept(Truncation("tail"), 16) == ids[-14:]
  assert kept(Truncation(), 16) == ids[:14]


def test_short_texts_are_unchanged_in_every_mode(tokenizer, jigsaw):
  whole = [whole_ids(tokenizer, e.text_a) for e in jigsaw]
  short = [i for i, ids in enumerate(whole) if len(ids) <= 62]
  assert len(short) >= 40
  for strategy in ALL_STRATEGIES:
    features = list(convert_examples([jigsaw[i] for i in short], BINARY, 64, tokenizer,
                                     strategy=strategy))
    for f, i in zip(features, short):
      check_single(f, whole[i], 64)
  # At the edge: a text that exactly fills its room is kept whole; one slot fewer drops
  # its last id (head), its first (tail) or one from its middle (head_tail).
  i = next(i for i in short if len(whole[i]) >= 20)
  ids, n = whole[i], len(whole[i])
  for strategy in ALL_STRATEGIES:
    assert convert_example(jigsaw[i], 0, BINARY, n + 2, tokenizer, strategy).token_ids == (
        [CLS] + ids + [SEP])
  one_less = {s.mode if s.head_tokens is None else (s.mode, s.head_tokens):
              convert_example(jigsaw[i], 0, BINARY, n + 1, tokenizer, s).token_ids[1:-1]
              for s in ALL_STRATEGIES}
  head = (n - 1) // 4
  assert one_less == {"head": ids[:-1], "tail": ids[1:],
                      "head_tail": ids[:head] + ids[head + 1:],
                      ("head_tail", 10): ids[:10] + ids[11:],
                      ("head_tail", 100): ids[:-1], ("head_tail", 0): ids[1:]}


def test_pair_lengths_is_googles_rule():
  for len_a in range(0, 30):
    for len_b in range(0, 30):
      for max_length in range(0, 45):
        a, b = list(range(len_a)), list(range(len_b))
        truncate_pair(a, b, max_length)
        assert pair_lengths(len_a, len_b, max_length) == (len(a), len(b)) == (
            googles_pair_lengths(len_a, len_b, max_length))


@pytest.mark.parametrize("max_seq_length", [16, 32, 48])
def test_pairs_share_the_room_by_googles_rule_and_keep_what_the_mode_says(
    tokenizer, mrpc, max_seq_length):
  whole = [(whole_ids(tokenizer, e.text_a), whole_ids(tokenizer, e.text_b)) for e in mrpc]
  lengths = [googles_pair_lengths(len(a), len(b), max_seq_length - 3) for a, b in whole]
  both = sum(la < len(a) and lb < len(b) for (la, lb), (a, b) in zip(lengths, whole))
  one = sum((la < len(a)) != (lb < len(b)) for (la, lb), (a, b) in zip(lengths, whole))
  # Every pair has both texts trimmed at 16; at 32 and 48 some lose tokens from one text
  # only and some fit.
  assert (both, one) == {16: (180, 0), 32: (153, 17), 48: (75, 29)}[max_seq_length]
  for strategy in ALL_STRATEGIES:
    fast = list(convert_examples(mrpc, BINARY, max_seq_length, tokenizer, strategy=strategy))
    for i, ((a, b), (len_a, len_b)) in enumerate(zip(whole, lengths)):
      kept_a, kept_b = expected_kept(a, len_a, strategy), expected_kept(b, len_b, strategy)
      assert (len(kept_a), len(kept_b)) == (len_a, len_b)
      f = fast[i]
      assert f.token_ids == [CLS] + kept_a + [SEP] + kept_b + [SEP]
      assert f.segment_ids == ([0] * (len_a + 2) + [1] * (len_b + 1) +
                               [0] * (max_seq_length - len_a - len_b - 3))
      assert convert_example(mrpc[i], i, BINARY, max_seq_length, tokenizer,
                             strategy).as_dict() == f.as_dict()


def test_pair_head_tail_keeps_each_texts_head(tokenizer, mrpc):
  """head_tail on a pair: each text keeps head_tokens (or a quarter of its share) from its
  start and the rest of its share from its end."""
  example = next(e for e in mrpc if len(whole_ids(tokenizer, e.text_a)) > 20 and
                 len(whole_ids(tokenizer, e.text_b)) > 20)
  a, b = whole_ids(tokenizer, example.text_a), whole_ids(tokenizer, example.text_b)
  f = convert_example(example, 0, BINARY, 23, tokenizer, Truncation("head_tail", 4))
  assert f.token_ids == [CLS] + a[:4] + a[-6:] + [SEP] + b[:4] + b[-6:] + [SEP]  # 10 + 10
  f = convert_example(example, 0, BINARY, 23, tokenizer, Truncation("head_tail"))
  assert f.token_ids == [CLS] + a[:2] + a[-8:] + [SEP] + b[:2] + b[-8:] + [SEP]  # 10 // 4
  f = convert_example(example, 0, BINARY, 23, tokenizer, Truncation("tail"))
  assert f.token_ids == [CLS] + a[-10:] + [SEP] + b[-10:] + [SEP]


def test_head_is_the_default_for_every_example(tokenizer, jigsaw, mrpc):
  cls_sep = (tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"])
  assert cls_sep == (CLS, SEP)
  for examples in (jigsaw, mrpc):
    for max_seq_length in (16, 64, 128):
      default = [f.as_dict() for f in convert_examples(examples, BINARY, max_seq_length,
                                                       tokenizer)]
      head = [f.as_dict() for f in convert_examples(examples, BINARY, max_seq_length,
                                                    tokenizer, strategy=Truncation("head"))]
      assert head == default
  for e in mrpc[:50]:  # the positional API, with and without a strategy
    a, b = tokenizer.encode(e.text_a), tokenizer.encode(e.text_b)
    plain = features_from_ids(a, b, 1, 3, 32, CLS, SEP)
    assert features_from_ids(a, b, 1, 3, 32, CLS, SEP, Truncation()).as_dict() == plain.as_dict()
    ta, tb = list(a), list(b)
    truncate_pair(ta, tb, 29)
    assert plain.token_ids == [CLS] + ta + [SEP] + tb + [SEP]


@pytest.mark.parametrize("max_seq_length", [16, 64])
def test_truncation_counts_agree_across_modes(tokenizer, jigsaw, mrpc, max_seq_length):
  for examples in (jigsaw, mrpc):
    exact = []
    for e in examples:
      length = len(whole_ids(tokenizer, e.text_a)) + 2
      if e.text_b is not None:
        length += len(whole_ids(tokenizer, e.text_b)) + 1
      exact.append(length)
    expected_truncated = sum(n > max_seq_length for n in exact)
    assert expected_truncated > 0
    counts = {}
    for strategy in ALL_STRATEGIES:
      count = TruncationCount()
      for _ in convert_examples(examples, BINARY, max_seq_length, tokenizer, chunk_size=97,
                                truncation=count, strategy=strategy):
        pass
      counts[repr(strategy)] = count
      assert count.truncated == expected_truncated
      if strategy.mode == "head":
        assert count.longest <= max(exact)
      else:  # whole texts: the longest length is exact
        assert (count.longest, count.longest_exact) == (max(exact), True)
    if examples is jigsaw:  # the head path did take prefixes of these long comments
      assert not counts["Truncation('head')"].longest_exact


def test_bad_modes_and_head_tokens_are_refused():
  with pytest.raises(ValueError, match="truncation mode 'middle' is not one of head, tail, "
                                       "head_tail"):
    Truncation("middle")
  with pytest.raises(ValueError, match="truncation mode 'HEAD' is not one of"):
    Truncation("HEAD")
  with pytest.raises(ValueError, match="truncation mode None is not one of"):
    Truncation(None)
  with pytest.raises(ValueError, match="head_tokens=128 is only for truncation mode "
                                       "head_tail, not tail"):
    Truncation("tail", 128)
  with pytest.raises(ValueError, match="head_tokens=5 is only for .* not head"):
    Truncation(head_tokens=5)
  for bad in (-1, 2.5, "128", True):
    with pytest.raises(ValueError, match="head_tokens must be a whole number of tokens >= 0 "
                                         "\\(or None for a quarter of the room\\), not %s"
                       % repr(bad).replace(".", "\\.")):
      Truncation("head_tail", bad)


def test_strategies_compare_and_describe_themselves():
  assert Truncation().as_dict() == {"mode": "head"}
  assert Truncation("tail").as_dict() == {"mode": "tail"}
  assert Truncation("head_tail", 128).as_dict() == {"mode": "head_tail", "head_tokens": 128}
  assert Truncation("head_tail").as_dict() == {"mode": "head_tail", "head_tokens": None}
  assert Truncation() == Truncation("head") and Truncation("tail") != Truncation()
  assert Truncation("head_tail", 128) != Truncation("head_tail")
  assert Truncation("head_tail", 128) == Truncation("head_tail", 128)
  assert Truncation() != "head"
  assert len({Truncation(), Truncation("head"), Truncation("head_tail", 3)}) == 2
  for strategy in ALL_STRATEGIES:
    assert Truncation.from_dict(strategy.as_dict()) == strategy


# --- through run_classifier -------------------------------------------------------------

@pytest.mark.slow
# (truncation is plain Python; the graph tokenizer's is tested on each runtime)
@pytest.mark.one_runtime("tf1")
def test_head_tail_runs_records_and_the_card_carry_the_strategy(tmp_path, tiny_checkpoint):
  """A head_tail model on the Jigsaw comments: the records hold head+tail ids, the card
  records the strategy, and a predict run from the card alone featurises the same way."""
  import json
  import os
  import tensorflow.compat.v1 as tf
  from conftest import JIGSAW, common_flags, run_flags
  from spec.run_errors import FlagError
  output_dir = str(tmp_path / "out")
  run_flags(*common_flags(tiny_checkpoint, output_dir) + [
      "--truncation=head_tail", "--truncation_head_tokens=5", "--do_train",
      "--num_train_steps=2"])
  with open(os.path.join(output_dir, "model_card.json")) as f:
    assert json.load(f)["truncation"] == {"mode": "head_tail", "head_tokens": 5}
  run_flags("--output_dir=" + output_dir, "--do_predict", "--data_dir=" + JIGSAW)
  tokenizer = FullTokenizer(TINY_VOCAB, do_lower_case=True)
  examples = get_processor("jigsaw_toxic", data_dir=JIGSAW).get_examples("test")
  record = os.path.join(output_dir, "features", "test.tf_record")
  written = [list(tf.train.Example.FromString(r).features.feature["input_ids"].int64_list.value)
             for r in tf.io.tf_record_iterator(record)][:len(examples)]
  long_ones = 0
  for example, ids in zip(examples, written):
    whole = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(example.text_a))
    if len(whole) > 30:
      long_ones += 1
      assert ids == [101] + whole[:5] + whole[-25:] + [102]  # 32 = [CLS] 5 + 25 [SEP]
  assert long_ones == 20
  with pytest.raises(FlagError, match="head_tokens=5 is only for truncation mode head_tail"):
    run_flags("--output_dir=" + output_dir, "--do_predict", "--data_dir=" + JIGSAW,
              "--truncation=tail", "--truncation_head_tokens=5")
