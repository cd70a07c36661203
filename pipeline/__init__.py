"""The orchestration of a run, one module per concern. run_classifier.py calls these in
the order of Google's run_classifier; only this package sees the whole RunConfig, and each
function takes the option groups or the values it reads (those that change the
configuration, or read most of its groups, take the RunConfig).

  checks        the options together, before any work
  distribution  several GPUs, several machines (TF_CONFIG), TPU hosts and pods
  card          the model card: read it, take its settings, check the task, write it
  build         a run's processor, tokenizer, model_fn and (TPU)Estimator
  splits        every split read, checked and featurised into records before step 1
  tasks         what a task adds: Jigsaw Unintended Bias' identity weights and bias report
                (bias_metrics: the competition's metric, plain numpy and pandas)
  training      training, with evaluations during it (eval_history: their record;
                progress: the progress lines)
  evaluation    the checkpoint to use, evaluation and prediction
  outputs       the files a run writes: results, predictions, its summary, its ModelRun
  folds         k-fold cross-validation
  export        the SavedModel, and predicting from one alone
  machine       the device named in run_summary.json and the benchmark's rows, and the
                process's C allocator
"""
