"""The Hugging Face code path of the benchmark: transformers on PyTorch, on the CPU.

  .venvs/hf/bin/python -m tools.bench_hf --model=minilm --seq=128 --order=grouped|random|loop \
      --data=CSV --vocab=vocab.txt --out=JSON
  .venvs/hf/bin/python -m tools.bench_hf --time_to_quality --model_dir=HF_DIR \
      --train_file=CSV --eval_file=CSV --out=JSON

Speed mode trains BertForSequenceClassification of one of bench_worker's shapes from
random weights, as a Hugging Face user would (Trainer, AdamW, linear warm-up and decay,
DataCollatorWithPadding padding each batch to its longest text), and times its steps
the way bench_worker times ours. --order=loop trains the same model in a plain PyTorch
loop instead (no Trainer), on batches of transformers' own LengthGroupedSampler, its
measured steps drawn from whole epochs so that their lengths are the epochs' (see
representative_window in tools/windows.py): the sampler sorts each megabatch (of up to
50 batches) longest first and begins the epoch with it, so a few dozen steps from an
epoch's start train on far longer batches than the epoch's mean. Each result also
reports that mean (epoch_mean_seq_length) beside its measured steps' mean.

Time-to-quality mode fine-tunes a pre-trained Hugging Face BERT folder for an epoch on
--train_file and reports the ROC-AUC on --eval_file (tools/time_to_quality.py writes
both, the same for every code path), with the wall time from process start; --out also
gets the held-out probabilities, in row order.

It runs in the optional environment of tools/requirements-hf.txt (.venvs/hf) and imports
no TensorFlow (from this project only pipeline.machine, modeling.statistics and
tools.windows, plain Python and numpy). torch and transformers are imported inside the
functions that use them, so that the tests, which run in the TensorFlow environments,
can import the rest.
"""

import time

PROCESS_START = time.time()  # before the heavy imports: start-up includes them

import argparse
import json
import os
import platform
import sys
import tempfile

from pipeline.machine import PEAK_SIZE, describe_cpu  # (plain Python, no TensorFlow)
from modeling.statistics import roc_auc  # (plain numpy)
from tools.bench_worker import MODELS, VOCAB_SIZE, read_rows  # (bench_worker imports no TF at load)
from tools.windows import (InputError, epoch_figures, padded_widths, pool_size,
                           representative_window)  # (plain Python)

LEARNING_RATE = 2e-5
WARMUP_PROPORTION = 0.1  # time-to-quality: as run_classifier's --warmup_proportion
PROGRESS_EVERY = 25  # steps between progress lines in time-to-quality mode
LABEL_IDS = {"0": 0, "1": 1}
SEED = 1  # of the model's initial weights, the Trainer, and every sampler and draw here
WEIGHT_DECAY = 0.01
MAX_GRAD_NORM = 1.0


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--model", choices=sorted(MODELS), default="tiny")
  parser.add_argument("--seq", type=int, default=128, help="max_seq_length (truncation)")
  parser.add_argument("--batch", type=int, default=32)
  parser.add_argument("--steps", type=int, default=20, help="measured steps")
  parser.add_argument("--warmup", type=int, default=3, help="steps before measuring")
  parser.add_argument("--order", choices=["random", "grouped", "loop"], default="random",
                      help="grouped: Trainer's length-grouped sampler (group_by_length); "
                           "loop: a plain PyTorch loop on that sampler's batches, its "
                           "measured steps as long as whole epochs' batches")
  parser.add_argument("--bf16", action="store_true",
                      help="speed mode: train under torch.autocast(\"cpu\", bfloat16), "
                           "Hugging Face's fastest CPU path where the CPU has bfloat16 "
                           "instructions (the Trainer's bf16=True; the loop's own autocast)")
  parser.add_argument("--data", help="CSV of text,label rows without a header")
  parser.add_argument("--train_file", help="time-to-quality: train on every row of this CSV")
  parser.add_argument("--eval_file", help="time-to-quality: hold out every row of this CSV")
  parser.add_argument("--vocab", help="an uncased BERT vocab.txt (speed mode)")
  parser.add_argument("--out", help="write the JSON result here too")
  parser.add_argument("--measure_peak", action="store_true",
                      help="only measure PyTorch's matrix-multiply peaks: float32, and "
                           "bfloat16 where the CPU has instructions for it")
  parser.add_argument("--peak_size", type=int, default=PEAK_SIZE,
                      help="with --measure_peak: the square matrices' side")
  parser.add_argument("--threads", type=int, default=os.cpu_count(),
                      help="torch.set_num_threads (default: every CPU)")
  parser.add_argument("--time_to_quality", action="store_true",
                      help="fine-tune --model_dir and report the held-out ROC-AUC")
  parser.add_argument("--model_dir", help="a Hugging Face BERT folder (config.json, "
                                          "model.safetensors, vocab.txt)")
  parser.add_argument("--epochs", type=float, default=1.0)
  parser.add_argument("--learning_rate", type=float, default=LEARNING_RATE)
  parser.add_argument("--predict_batch", type=int, default=64)
  args = parser.parse_args(argv)
  if args.time_to_quality and not args.model_dir:
    parser.error("--time_to_quality needs --model_dir")
  if args.measure_peak:
    return args
  if not args.time_to_quality and not args.vocab:
    parser.error("speed mode needs --vocab")
  if args.time_to_quality and not (args.train_file and args.eval_file):
    parser.error("--time_to_quality needs --train_file and --eval_file")
  if not args.time_to_quality and not args.data:
    parser.error("speed mode needs --data")
  return args


# ---- Pure parts: no torch, no transformers (tests/test_bench_hf.py runs them on TF's
# environments).

def check_both_labels(labels, part, path):
  """Refuses a part of the split that holds one label: a file sorted by label (as the
  Jigsaw sets here are) must be shuffled before it is split, or training learns one class
  and the held-out ROC-AUC is undefined."""
  present = sorted(set(labels))
  if present != [0, 1]:
    raise InputError("the %s rows of %s all have label %s: shuffle the file first (is it "
                     "sorted by label?)" % (part, path, ", ".join(str(label) for label in present)))


def label_ids(rows, path):
  try:
    return [LABEL_IDS[label] for _, label in rows]
  except KeyError as error:
    raise InputError("%s: label %r is neither \"0\" nor \"1\"" % (path, error.args[0]))


def schedule(train_rows, batch, epochs):
  """(training steps, warm-up steps) of time-to-quality training, counted as Google's
  run_classifier counts them: rows / batch x epochs and a tenth of that for warm-up, each
  rounded down. tools/time_to_quality.py gives every path this count. Every step takes a whole batch (the partial last one of an epoch is
  dropped, as the project's and Google's training input does)."""
  steps = int(train_rows / float(batch) * epochs)
  if not steps:
    raise InputError("%d training rows make no whole batch of %d" % (train_rows, batch))
  return steps, int(steps * WARMUP_PROPORTION)


class PaddedBatchRecorder(object):
  """Wraps a collator and records the shape of every batch it pads, in the order the
  data loader asks for them."""

  def __init__(self, collate):
    self.collate = collate
    self.widths = []  # padded sequence length of each batch
    self.rows = []

  def __call__(self, features):
    batch = self.collate(features)
    rows, width = batch["input_ids"].shape
    self.rows.append(int(rows))
    self.widths.append(int(width))
    return batch


def consumed(recorded, steps_run):
  """The entries of the batches that the steps trained on, from those the collator
  recorded: the loader collates ahead of the step that consumes a batch (accelerate keeps
  the next batch in hand to know which one is the last), so the collator may have padded
  more batches than ran, and the extra ones come last."""
  if len(recorded) < steps_run:
    raise AssertionError("the collator padded %d batches for %d steps"
                         % (len(recorded), steps_run))
  return list(recorded[:steps_run])


class StepClock(object):
  """Wall-clock times of a training run: its start, the first step's start, every step's
  end; optionally a progress line every so many steps."""

  def __init__(self, total_steps, progress_every=None, label="train"):
    self.total_steps = total_steps
    self.progress_every = progress_every
    self.label = label
    self.train_begin = None
    self.first_step_begin = None
    self.step_ends = []

  def began_training(self):
    self.train_begin = time.time()

  def began_step(self):
    if self.first_step_begin is None:
      self.first_step_begin = time.time()

  def ended_step(self):
    self.step_ends.append(time.time())
    done = len(self.step_ends)
    if self.progress_every and (done % self.progress_every == 0 or done == self.total_steps):
      elapsed = self.step_ends[-1] - self.first_step_begin
      print("%s: step %d/%d, %.1f s of training, %.2f s/step"
            % (self.label, done, self.total_steps, elapsed, elapsed / done), flush=True)


def speed_figures(clock, widths, warmup, steps, batch):
  """bench_worker.run's figures from the step times and the measured steps' lengths: the
  measured span runs from the end of the last warm-up step (or the first step's start
  with no warm-up) to the end of the last step."""
  ends = clock.step_ends
  assert len(ends) == warmup + steps, "ran %d steps, expected %d" % (len(ends), warmup + steps)
  measured = ends[-1] - (ends[warmup - 1] if warmup else clock.first_step_begin)
  lengths = consumed(widths, warmup + steps)[warmup:]
  return dict(
      measured_seconds=measured, ms_per_step=1000.0 * measured / steps,
      examples_per_sec=steps * batch / measured,
      warmup_seconds=(ends[warmup - 1] - clock.train_begin) if warmup else 0.0,
      mean_seq_length=sum(lengths) / float(len(lengths)), seq_lengths=lengths)


def split_for_weight_decay(names, layer_norm_names):
  """(decayed, exempt) parameter names, as the Trainer splits them for AdamW: weight
  decay shrinks weights towards zero, which suits neither a bias nor a layer norm's
  scale and shift (layer_norm_names: the parameters of the model's LayerNorm modules)."""
  exempt = [name for name in names if name in layer_norm_names or "bias" in name.lower()]
  exempt_names = set(exempt)
  return [name for name in names if name not in exempt_names], exempt


def load_average():
  try:
    return os.getloadavg()[0]
  except OSError:
    return None


# ---- The Hugging Face parts.

def runtime_info():
  import tokenizers
  import torch
  import transformers
  return {"python": platform.python_version(), "torch": torch.__version__,
          "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
          "threads": torch.get_num_threads(), "device": describe_cpu()}


def load_tokenizer(vocab_path):
  """The uncased WordPiece tokenizer of vocab_path, checked to hold the whole vocabulary:
  transformers 5 takes the file as vocab= and silently ignores vocab_file=, leaving five
  special tokens, so that every word became [UNK]."""
  from transformers import BertTokenizerFast
  with open(vocab_path, encoding="utf-8") as f:
    size = sum(1 for line in f if line.strip())
  for argument in ("vocab", "vocab_file"):  # (transformers 5, then 4)
    tokenizer = BertTokenizerFast(do_lower_case=True, **{argument: vocab_path})
    if len(tokenizer) == size:
      return tokenizer
  raise InputError("the tokenizer built from %s holds %d tokens, not the file's %d"
                   % (vocab_path, len(tokenizer), size))


def featurise(tokenizer, rows, seq, path):
  """Each row's ids, truncated to seq tokens and not padded (the collator pads each
  batch), with its label; and the seconds that took."""
  started = time.time()
  encoded = tokenizer([text for text, _ in rows], truncation=True, max_length=seq)
  labels = label_ids(rows, path)
  features = [{"input_ids": ids, "token_type_ids": types, "attention_mask": mask,
               "labels": label}
              for ids, types, mask, label in zip(encoded["input_ids"], encoded["token_type_ids"],
                                                 encoded["attention_mask"], labels)]
  return features, time.time() - started


def speed_config(model):
  from transformers import BertConfig
  layers, hidden, heads, intermediate = MODELS[model]
  return BertConfig(vocab_size=VOCAB_SIZE, hidden_size=hidden, num_hidden_layers=layers,
                    num_attention_heads=heads, intermediate_size=intermediate,
                    hidden_act="gelu_new",  # the tanh GELU, which the TensorFlow paths compute
                    hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, num_labels=2)


def training_arguments(output_dir, batch, learning_rate, warmup_steps, max_steps, grouped,
                       bf16=False):
  import dataclasses
  from transformers import TrainingArguments
  names = {field.name for field in dataclasses.fields(TrainingArguments)}
  # transformers 5 replaced group_by_length=True by train_sampling_strategy.
  order = ({"train_sampling_strategy": "group_by_length" if grouped else "random"}
           if "train_sampling_strategy" in names else {"group_by_length": grouped})
  return TrainingArguments(
      output_dir=output_dir, per_device_train_batch_size=batch, learning_rate=learning_rate,
      warmup_steps=warmup_steps, lr_scheduler_type="linear", max_steps=max_steps,
      max_grad_norm=MAX_GRAD_NORM, weight_decay=WEIGHT_DECAY, optim="adamw_torch",
      use_cpu=True, seed=SEED, bf16=bf16,  # (bf16 on the CPU: torch.autocast)
      report_to=[], save_strategy="no", logging_strategy="no", disable_tqdm=True,
      dataloader_num_workers=0, dataloader_pin_memory=False,  # (no GPU to pin for)
      # Every step trains on a whole batch, as the TensorFlow paths do: a partial last
      # batch of an epoch would time fewer examples as if it were a full one.
      dataloader_drop_last=True, **order)


def trainer_callback(clock):
  from transformers import TrainerCallback

  class _Clock(TrainerCallback):
    def on_train_begin(self, args, state, control, **kwargs):
      clock.began_training()

    def on_step_begin(self, args, state, control, **kwargs):
      clock.began_step()

    def on_step_end(self, args, state, control, **kwargs):
      clock.ended_step()

  return _Clock()


def train(model, tokenizer, features, arguments, clock):
  """Trains with Trainer; returns the recorder of the batches the collator padded."""
  from transformers import DataCollatorWithPadding, Trainer
  recorder = PaddedBatchRecorder(DataCollatorWithPadding(tokenizer))
  # A list of dicts: Trainer's length-grouped sampler reads len(row["input_ids"]) of each,
  # which costs nothing here (a datasets.Dataset would need a "length" column instead).
  trainer = Trainer(model=model, args=arguments, train_dataset=features,
                    data_collator=recorder, processing_class=tokenizer,
                    callbacks=[trainer_callback(clock)])
  trainer.train()
  assert trainer.state.global_step == clock.total_steps, (
      "trained %d steps, expected %d" % (trainer.state.global_step, clock.total_steps))
  batch = arguments.per_device_train_batch_size
  rows = consumed(recorder.rows, clock.total_steps)
  assert set(rows) == {batch}, "batches of %s rows, expected %d" % (sorted(set(rows)), batch)
  return recorder


def attention_implementation(model):
  return getattr(model.config, "_attn_implementation", None)


def sampler_orders(order, lengths, batch, epochs):
  """epochs orders of row indices from the sampler the Trainer builds for order
  (LengthGroupedSampler for grouped and loop, RandomSampler for random), seeded: to
  measure the epoch's lengths without training on them."""
  import torch
  from torch.utils.data import RandomSampler
  from transformers.trainer_pt_utils import LengthGroupedSampler
  generator = torch.Generator().manual_seed(SEED)
  if order == "random":
    sampler = RandomSampler(range(len(lengths)), generator=generator)
  else:
    sampler = LengthGroupedSampler(batch, lengths=lengths, generator=generator)
  return [list(sampler) for _ in range(epochs)]  # (each pass draws a new order)


def adamw_with_linear_schedule(model, learning_rate, warmup_steps, total_steps):
  """torch.optim.AdamW and the linear warm-up and decay, set as the Trainer sets them for
  training_arguments (optim="adamw_torch", lr_scheduler_type="linear")."""
  import torch
  from transformers import get_linear_schedule_with_warmup
  named = dict(model.named_parameters())
  layer_norm_names = {"%s.%s" % (module_name, name) if module_name else name
                      for module_name, module in model.named_modules()
                      if isinstance(module, torch.nn.LayerNorm)
                      for name, _ in module.named_parameters(recurse=False)}
  decayed, exempt = split_for_weight_decay(list(named), layer_norm_names)
  optimizer = torch.optim.AdamW(
      [{"params": [named[name] for name in decayed], "weight_decay": WEIGHT_DECAY},
       {"params": [named[name] for name in exempt], "weight_decay": 0.0}], lr=learning_rate)
  return optimizer, get_linear_schedule_with_warmup(optimizer, warmup_steps, total_steps)


def train_plain_loop(model, tokenizer, features, window, warmup_steps, clock, bf16=False):
  """Trains on the window's batches (lists of row indices), one step each, in a plain
  PyTorch loop: what the Trainer's step does (forward, backward, clipping, AdamW, the
  schedule), without its callbacks, logging and accounting; bf16: its forward pass under
  torch.autocast("cpu", bfloat16), as the Trainer's bf16=True. Returns the recorder of
  the batches the collator padded."""
  import contextlib
  import torch
  from transformers import DataCollatorWithPadding
  recorder = PaddedBatchRecorder(DataCollatorWithPadding(tokenizer))
  loader = torch.utils.data.DataLoader(features, batch_sampler=window, collate_fn=recorder)
  optimizer, scheduler = adamw_with_linear_schedule(model, LEARNING_RATE, warmup_steps,
                                                    clock.total_steps)
  model.train()
  clock.began_training()
  for inputs in loader:  # (as the Trainer, the batch is collated before its step begins)
    clock.began_step()
    with (torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else
          contextlib.nullcontext()):
      loss = model(**inputs).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    clock.ended_step()
  return recorder


def train_speed(args, model, tokenizer, features, lengths, clock):
  """Trains the measured run of args.order; returns (the recorder of the padded batches,
  the figures of whole epochs of its sampler)."""
  epochs, _ = pool_size(len(features), args.batch, args.warmup, args.steps)
  orders = sampler_orders(args.order, lengths, args.batch, epochs)
  if args.order == "loop":  # measured on the epochs it draws its steps from
    _, window = representative_window(orders, lengths, args.batch, args.warmup, args.steps,
                                      SEED)
    recorder = train_plain_loop(model, tokenizer, features, window, args.warmup, clock,
                                args.bf16)
    assert recorder.widths == padded_widths(window, lengths), "the collator padded otherwise"
  else:  # (the Trainer draws its own orders, from the same sampler)
    with tempfile.TemporaryDirectory(prefix="bench_hf_") as work:
      arguments = training_arguments(work, args.batch, LEARNING_RATE, args.warmup,
                                     clock.total_steps, args.order == "grouped", args.bf16)
      recorder = train(model, tokenizer, features, arguments, clock)
  return recorder, epoch_figures(orders, lengths, args.batch)


def matmul_peak_gflops(n=PEAK_SIZE, repeats=10, rounds=5, dtype="float32"):
  """Best observed GFLOP/s of an n x n matmul chain in dtype in PyTorch on this machine
  (tools/bench_worker.py's for TensorFlow: the same chain, size and rounds)."""
  import time
  import torch
  a = (torch.rand(n, n, generator=torch.Generator().manual_seed(0)) / n).to(
      getattr(torch, dtype))
  with torch.no_grad():
    def chain():
      product = a
      for _ in range(repeats):
        product = product @ a
      return float(product.float().sum())
    chain()
    best = float("inf")
    for _ in range(rounds):
      start = time.time()
      chain()
      best = min(best, time.time() - start)
  return 2.0 * n ** 3 * repeats / best / 1e9


def peaks(threads, size=None):
  """PyTorch's float32 matmul peak (size x size, PEAK_SIZE by default), and its bfloat16
  one where the CPU has bfloat16 instructions (else None, with why), as
  tools/bench_worker.peaks gives TensorFlow's."""
  import torch
  from pipeline.machine import matmul_peaks
  torch.set_num_threads(threads)
  size = size or PEAK_SIZE
  return dict(runtime_info(), peak_size=size, **matmul_peaks(
      lambda dtype: matmul_peak_gflops(size, dtype=dtype)))


def run_speed(args):
  import torch
  import transformers
  from transformers import BertForSequenceClassification
  torch.set_num_threads(args.threads)
  rows = read_rows(args.data, 0)
  tokenizer = load_tokenizer(args.vocab)
  features, featurise_seconds = featurise(tokenizer, rows, args.seq, args.data)
  lengths = [len(feature["input_ids"]) for feature in features]
  transformers.set_seed(SEED)
  model = BertForSequenceClassification(speed_config(args.model))
  clock = StepClock(args.warmup + args.steps)
  load_before = load_average()
  recorder, epoch_lengths = train_speed(args, model, tokenizer, features, lengths, clock)
  return dict(
      runtime_info(), impl="hf", order=args.order, model=args.model, seq=args.seq,
      precision="bfloat16 (torch.autocast)" if args.bf16 else "float32",
      batch=args.batch, steps=args.steps, warmup_steps=args.warmup, dynamic_padding=True,
      startup_seconds=clock.train_begin - PROCESS_START,
      first_step_wait_seconds=clock.first_step_begin - clock.train_begin,
      featurise_rows=len(rows), featurise_rows_per_sec=len(rows) / featurise_seconds,
      tokenizer=type(tokenizer).__name__, attention=attention_implementation(model),
      hidden_act=model.config.hidden_act, collated_batches=len(recorder.widths),
      load_before=load_before, load_after=load_average(),
      **epoch_lengths,
      **speed_figures(clock, recorder.widths, args.warmup, args.steps, args.batch))


def positive_probabilities(model, tokenizer, features, batch):
  """The positive class's probability for each feature, in order, batch by batch (each
  padded to its longest text), with dropout off."""
  import torch
  from transformers import DataCollatorWithPadding
  collate = DataCollatorWithPadding(tokenizer)
  model.eval()
  probabilities = []
  with torch.inference_mode():
    for start in range(0, len(features), batch):
      inputs = collate([{k: v for k, v in feature.items() if k != "labels"}
                        for feature in features[start:start + batch]])
      logits = model(**inputs).logits.double()
      probabilities.extend(torch.softmax(logits, dim=-1)[:, 1].tolist())
  return probabilities


def run_time_to_quality(args):
  import torch
  import transformers
  from transformers import BertForSequenceClassification
  torch.set_num_threads(args.threads)
  train_rows, held_out_rows = read_rows(args.train_file, 0), read_rows(args.eval_file, 0)
  train_path, held_out_path = args.train_file, args.eval_file
  tokenizer = load_tokenizer(os.path.join(args.model_dir, "vocab.txt"))
  train_features, _ = featurise(tokenizer, train_rows, args.seq, train_path)
  held_out_features, _ = featurise(tokenizer, held_out_rows, args.seq, held_out_path)
  check_both_labels([feature["labels"] for feature in train_features], "training", train_path)
  check_both_labels([feature["labels"] for feature in held_out_features], "held-out",
                    held_out_path)
  transformers.set_seed(SEED)
  # The classifier head starts random; the checkpoint keeps its own hidden_act.
  model = BertForSequenceClassification.from_pretrained(args.model_dir, num_labels=2)
  total_steps, warmup_steps = schedule(len(train_features), args.batch, args.epochs)
  clock = StepClock(total_steps, PROGRESS_EVERY, "time_to_quality")
  train_started = time.time()
  with tempfile.TemporaryDirectory(prefix="bench_hf_") as work:
    arguments = training_arguments(work, args.batch, args.learning_rate, warmup_steps,
                                   total_steps, grouped=False)
    recorder = train(model, tokenizer, train_features, arguments, clock)
  train_seconds = time.time() - train_started
  predict_started = time.time()
  scores = positive_probabilities(model, tokenizer, held_out_features, args.predict_batch)
  predict_seconds = time.time() - predict_started
  auc = roc_auc(scores, [feature["labels"] for feature in held_out_features])
  wall_seconds = time.time() - PROCESS_START
  widths = consumed(recorder.widths, total_steps)
  return dict(
      runtime_info(), impl="hf", mode="time_to_quality", model_dir=args.model_dir,
      train_file=args.train_file, eval_file=args.eval_file, seq=args.seq,
      batch=args.batch, epochs=args.epochs,
      learning_rate=args.learning_rate, train_rows=len(train_rows),
      eval_rows=len(held_out_rows), steps=total_steps, warmup_steps=warmup_steps,
      wall_seconds=wall_seconds, startup_seconds=clock.train_begin - PROCESS_START,
      train_seconds=train_seconds, predict_seconds=predict_seconds, auc=auc,
      mean_seq_length=sum(widths) / float(len(widths)),
      tokenizer=type(tokenizer).__name__, attention=attention_implementation(model),
      hidden_act=model.config.hidden_act, predict_batch=args.predict_batch,
      probabilities=scores)


def main(argv=None):
  args = parse_args(argv)
  try:
    result = (peaks(args.threads, args.peak_size) if args.measure_peak else
              run_time_to_quality(args) if args.time_to_quality else run_speed(args))
  except InputError as error:
    sys.exit("bench_hf: %s" % error)
  if args.out:
    with open(args.out, "w") as f:
      f.write(json.dumps(result, indent=2, sort_keys=True))
  # (The held-out probabilities, one per row, go to --out only.)
  shown = {k: v for k, v in result.items() if k != "probabilities"}
  print(json.dumps(shown, indent=2, sort_keys=True))


if __name__ == "__main__":
  main()
