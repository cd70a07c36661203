"""The commands of README.md and docs/ work: every fenced `bash` command a user would paste
is parsed by what reads it (run_classifier's flags, ./run.sh's subcommands, the server's
options, a tool's module), so a renamed or removed flag fails here; README's own way
through (train on a CSV, predict, export) runs on the shipped samples, scaled down."""

import glob
import os
import re
import shlex
import shutil

import pytest

from conftest import JIGSAW, ROOT, TINY

PAGES = [os.path.join(ROOT, "README.md")] + sorted(
    glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))


def bash_blocks(path):
  with open(path, encoding="utf-8") as f:
    text = f.read()
  return re.findall(r"```bash\n(.*?)```", text, re.S)


def commands(block):
  """(the block's commands, one a line with continuations joined, {heredoc file: text})."""
  lines, files, heredoc = [], {}, None
  pending = ""
  for line in block.splitlines():
    if heredoc:
      name, end, body = heredoc
      if line.strip() == end:
        files[name] = "\n".join(body) + "\n"
        heredoc = None
      else:
        body.append(line)
      continue
    found = re.match(r"cat > (\S+) <<'?(\w+)'?", line.strip())
    if found:
      heredoc = (found.group(1), found.group(2), [])
      continue
    pending += line.rstrip("\\").rstrip() + " " if line.rstrip().endswith("\\") else line
    if not line.rstrip().endswith("\\"):
      if pending.strip() and not pending.strip().startswith("#"):
        lines.append(pending.split(" #", 1)[0].strip())
      pending = ""
  return lines, files


def run_sh_subcommands():
  with open(os.path.join(ROOT, "run.sh")) as f:
    text = f.read()
  cases = text[text.rindex('case "${1:-}" in'):]
  return set(re.findall(r"^  ([a-z-]+)\) ", cases, re.M))


def every_command():
  found = []
  for page in PAGES:
    for block in bash_blocks(page):
      lines, files = commands(block)
      found += [(os.path.relpath(page, ROOT), line, files) for line in lines]
  return found


def test_the_pages_have_commands():
  pages = {page for page, _, _ in every_command()}
  assert "README.md" in pages and len(every_command()) > 20


def read_by_reproduce(words):
  """The command's arguments as ./run.sh reproduce reads them, and its run_classifier
  flags (after --) as run_classifier does."""
  from run_classifier import parse_flags
  from tools import reproduce
  args, extra = reproduce.parse_args(words)
  assert parse_flags(["run_classifier.py"] + [
      "--flagfile=" + path for path in reproduce.recipe_flag_files(args.recipe, args.device)] +
      ["--output_dir=" + args.output_dir] + extra) is not None


@pytest.mark.parametrize("page, line, files", every_command(),
                         ids=["%s:%s" % (p, l[:60]) for p, l, _ in every_command()])
def test_each_command_is_read_by_what_it_names(page, line, files, tmp_path, monkeypatch):
  monkeypatch.chdir(str(tmp_path))
  for name, text in files.items():
    os.makedirs(os.path.dirname(name) or ".", exist_ok=True)
    with open(name, "w") as f:
      f.write(text)
  words = shlex.split(line)
  if words[:2] == ["python", "run_classifier.py"]:
    from run_classifier import parse_flags
    for word in words:  # (a flag file another command writes, the converter's say: its
      if word.startswith("--flagfile=") and not os.path.exists(word.split("=", 1)[1]):
        path = word.split("=", 1)[1]  # flags are that command's; this one's are read here)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        open(path, "w").close()
    config = parse_flags(["run_classifier.py"] + words[2:])
    assert config is not None
  elif words[0] == "./run.sh":
    assert words[1] in run_sh_subcommands(), "%s: ./run.sh has no %s" % (page, words[1])
    if words[1] == "serve":
      from serving import server_options
      args = server_options.parse_args(words[2:])
      assert server_options.problem(args) is None
    if words[1] == "reproduce":
      read_by_reproduce(words[2:])
  elif words[0] in ("python", "python3") and words[1] == "-m":
    module = words[2]
    assert os.path.exists(os.path.join(ROOT, *module.split(".")) + ".py"), module
    if module == "tools.reproduce":
      read_by_reproduce(words[3:])
  # (other lines: source, curl, pip, gsutil, cat, python -c: the user's shell's own)


@pytest.mark.slow
@pytest.mark.one_runtime("tf2")  # (the same commands; the suites run at once)
def test_the_readmes_way_through_runs_on_the_samples(tmp_path, tiny_checkpoint, monkeypatch):
  """README's training command on the Jigsaw sample (BERT-Tiny's shape for BERT_DIR; two
  steps), then its predict and export commands on the model it wrote."""
  monkeypatch.chdir(str(tmp_path))
  os.makedirs("BERT_DIR")
  for name in os.listdir(os.path.dirname(tiny_checkpoint)):
    if name.startswith("bert_model.ckpt"):
      shutil.copy(os.path.join(os.path.dirname(tiny_checkpoint), name), "BERT_DIR")
  for name in ("bert_config.json", "vocab.txt"):
    shutil.copy(os.path.join(TINY, name), "BERT_DIR")
  shutil.copytree(JIGSAW, "my_data")
  shutil.copy(os.path.join("my_data", "valid.csv"), os.path.join("my_data", "dev.csv"))
  shutil.copy(os.path.join("my_data", "test.csv"), "new.csv")
  readme = [(line, files) for page, line, files in every_command() if page == "README.md"]
  from run_classifier import parse_flags, run
  ran = []
  for line, files in readme:
    for name, text in files.items():  # (the flag file the README writes)
      with open(name, "w") as f:
        f.write(text)
    words = shlex.split(line)
    if words[:2] != ["python", "run_classifier.py"] or "--use_tpu" in words or any(
        w.startswith("--num_gpus") for w in words):
      continue
    if "--do_train" in words:
      words += ["--num_train_steps=2", "--max_seq_length=32"]
    result = run(parse_flags(["run_classifier.py"] + words[2:]))
    ran.append((words, result))
  trained = [r for w, r in ran if "--do_train" in w]
  assert len(trained) == 1 and trained[0].eval["num_examples"] == 25
  assert os.path.exists(os.path.join("out", "toxicity", "test_results.tsv"))
  assert any("--do_export" in w for w, _ in ran) and any(r.export for _, r in ran)
  predicted = [r for w, r in ran if "--do_predict" in w and "--do_train" not in w]
  assert predicted and predicted[0].predictions.endswith("test_results.tsv")
