# Image datasets for an image classifier (runtime/image_data.h): ResNet-18
# with the CIFAR stem (models/resnet.xml, stem=cifar) trained from IDX
# files (gzipped and plain, a folder and a file), CIFAR-10 batches and an
# ImageFolder of PNG, BMP and JPEG files of several sizes (tests/image_sets.py
# writes them), each into a 1- and a 3-channel model where the channels and
# sizes differ; the real Fashion-MNIST (Debian's dataset-fashion-mnist)
# loads; the same weights and the same preprocessed batch give PyTorch's
# loss and gradients (tests/parity/torch_parity.py, stem and channels);
# one device with 2 micro-batches and 2 replicas of 1 (the same batch-norm
# groups) train to the same losses with --augment standard, the batches
# being the same rows whatever the plan; --val-data validates on the whole
# held-out set (loss and top-1 accuracy, printed, logged, drawn by fusionc
# report), a 3-stage pipeline (whose middle stage holds neither images nor
# labels) to one device's losses and accuracies; and faulty sets are refused with
# one line naming the file: an IDX file cut short, a gzip stream cut
# short, labels of another count, a text file in a class folder, a cut
# CIFAR batch, a label past the model's classes, a file that is no image
# dataset, an ImageFolder with no held-out split given to --val-data; and a
# run resumed from a checkpoint trains on the uninterrupted run's images.
# (test_image_feed checks the epochs, augmentation and
# conversions row by row.)
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs
py=/usr/bin/python3
"$py" tests/image_sets.py "$work/sets" || { echo "FAIL: tests/image_sets.py" >&2; exit 1; }
small=(--set depth=18 --set stem=cifar --set batch=8)
gray=("${small[@]}" --set channels=1 --set size=28 --set classes=10)
rgb=("${small[@]}" --set channels=3 --set size=32 --set classes=10)
compile() {
  local out=$1
  shift
  "$FUSIONC" compile models/resnet.xml "$@" -o "$work/$out" >"$work/$out.log" 2>&1 && pass ||
    fail "compile $out: $(tail -3 "$work/$out.log")"
}
compile gray clusters/local-1.xml "${gray[@]}"
compile rgb clusters/local-1.xml "${rgb[@]}"
compile two-classes clusters/local-1.xml "${small[@]}" --set channels=1 --set size=28 --set classes=2
gray1=$work/gray/cpu0/fusion-cpu0
rgb1=$work/rgb/cpu0/fusion-cpu0
losses() { awk '/^step +[0-9]+\//{print $4}' "$1"; }

# trains NAME PROGRAM DATA STEPS SUMMARY...: exit 0, STEPS losses, and each
# SUMMARY string in what it printed.
trains() {
  local name=$1 prog=$2 data=$3 steps=$4 s
  shift 4
  if "$prog" --data "$data" --steps "$steps" --threads 2 >"$work/$name.out" 2>&1; then pass
  else fail "$name: exit status $?: $(tail -3 "$work/$name.out")"; return; fi
  expect_eq "$name: losses" "$steps" "$(losses "$work/$name.out" | wc -l)"
  for s in "$@"; do
    grep -qF -- "$s" "$work/$name.out" && pass || fail "$name: '$s' not in: $(grep '^fusion: ' "$work/$name.out")"
  done
}
trains idx-folder "$gray1" "$work/sets/idx" 2 "training images: IDX $work/sets/idx/train-images-idx3-ubyte.gz, 64 images 1x28x28, fed as 1x28x28" \
  "10 classes" "an epoch is 8 steps of 8 images" "2 steps of 8 images"
trains idx-file "$gray1" "$work/sets/idx/t10k-labels-idx1-ubyte" 1 "IDX $work/sets/idx/t10k-images-idx3-ubyte, 24 images"
trains idx-into-rgb "$rgb1" "$work/sets/idx" 1 "64 images 1x28x28, fed as 3x32x32"
trains cifar "$rgb1" "$work/sets/cifar" 1 "CIFAR-10 $work/sets/cifar/data_batch_1.bin, 40 images 3x32x32, fed as 3x32x32"
trains cifar-file "$rgb1" "$work/sets/cifar/test_batch.bin" 1 "8 images 3x32x32"
trains cifar-into-gray "$gray1" "$work/sets/cifar" 1 "40 images 3x28x28, fed as 1x28x28"
trains folder "$rgb1" "$work/sets/folder" 1 "ImageFolder $work/sets/folder/train, 18 images 3x32x32" "3 classes"
# A JPEG too (gnuplot's libgd writes one).
gnuplot -e "set terminal jpeg size 60,45; set output '$work/sets/folder/train/cat/plot.jpg'; plot x" 2>/dev/null
trains folder-jpeg "$gray1" "$work/sets/folder" 1 "19 images 1x28x28"
trains fashion-mnist "$gray1" /usr/share/datasets/fashion-mnist 1 "60000 images 1x28x28" "10 classes" \
  "an epoch is 7500 steps"

# PyTorch from the same weights on the same preprocessed batch (Fashion-MNIST's first, augmented):
# the loss and every gradient.  Not on image_sets.py's noise: there one batch-norm channel of
# layer 3 has so small a variance that PyTorch's own f32 gradients are 2e-2 of their largest
# magnitude from its f64 ones (fusion's 2.5e-6: measured), and the comparison measures PyTorch.
cfg="depth=18,batch=8,size=28,classes=10,stem=1,channels=1"
"$py" tests/parity/torch_parity.py make resnet "$cfg" "$work/w.st" "$work/unused.st" 7 && pass || fail "parity: make"
"$gray1" --init "$work/w.st" --data /usr/share/datasets/fashion-mnist --steps 1 --augment standard --dump-grads "$work/dump.st" \
  >"$work/parity.out" 2>&1 && pass || fail "parity run: $(tail -3 "$work/parity.out")"
if "$py" tests/parity/torch_parity.py grads resnet "$cfg" "$work/w.st" "$work/dump.st" >"$work/parity.cmp" 2>&1; then
  pass; echo "PyTorch on the same batch: $(tail -1 "$work/parity.cmp")" >&2
else fail "PyTorch on the same batch: $(cat "$work/parity.cmp")"; fi

# A resumed run goes on with the same images: its epochs are the checkpoint's seed's
# (no --seed given on resume), and its steps 3 and 4 are the uninterrupted run's.
aug=(--data "$work/sets/idx" --augment standard --threads 1)
"$gray1" "${aug[@]}" --steps 4 --seed 3 >"$work/full.out" 2>&1 && pass || fail "uninterrupted: $(tail -2 "$work/full.out")"
"$gray1" "${aug[@]}" --steps 2 --seed 3 --save "$work/ckpt" >"$work/half.out" 2>&1 && pass ||
  fail "the first half: $(tail -2 "$work/half.out")"
"$gray1" "${aug[@]}" --steps 4 --resume "$work/ckpt" >"$work/resumed.out" 2>&1 && pass ||
  fail "resumed: $(tail -2 "$work/resumed.out")"
expect_eq "resumed: steps 3 and 4" "$(losses "$work/full.out" | tail -2)" "$(losses "$work/resumed.out")"

# Validation on the whole held-out set (t10k: 24 images, in batches of 8): the loss and top-1
# accuracy, printed and logged, the same on one device and on a 3-stage pipeline (its middle
# stage holds neither images nor labels: it reads the held-out labels' count alone); drawn by
# fusionc report.
val=(--data "$work/sets/idx" --val-data "$work/sets/idx" --val-every 2 --steps 4 --seed 3 --threads 1)
"$gray1" "${val[@]}" --log "$work/val.jsonl" >"$work/val.out" 2>&1 && pass || fail "validation: $(tail -3 "$work/val.out")"
grep -q "held-out images: IDX $work/sets/idx/t10k-images-idx3-ubyte, 24 images" "$work/val.out" && pass ||
  fail "validation: the held-out set: $(grep '^fusion: ' "$work/val.out")"
awk '/val_loss/ { for (i = 1; i < NF; i++) if ($i == "val_acc") print $(i + 1) }' "$work/val.out" >"$work/one.acc"
expect_eq "validations" 2 "$(wc -l <"$work/one.acc")"
# An accuracy over 24 images is a multiple of 1/24.
awk '{ k = $1 * 24; if (k - int(k + 0.5) > 1e-3 || int(k + 0.5) - k > 1e-3) bad = 1 } END { exit bad }' "$work/one.acc" \
  && pass || fail "val_acc is not a count of 24: $(paste -sd' ' "$work/one.acc")"
grep -q '"val_acc": ' "$work/val.jsonl" && pass || fail "no val_acc in the log: $(tail -1 "$work/val.jsonl")"
"$FUSIONC" report "$work/val.jsonl" -o "$work/report" >"$work/report.out" 2>&1 && [ -s "$work/report/accuracy.png" ] &&
  pass || fail "fusionc report drew no accuracy.png: $(cat "$work/report.out")"
# The plans' runs (several processes; no parser or wire coverage beyond the above) run in the
# release build only: the sanitizer build's are slow, and its stage may leave them out.
if [ "${FUSION_SANITIZE:-OFF}" = ON ]; then
  echo "the sanitizer build: the runs of several devices are left to the release stage" >&2
else
  # The same rows whatever the plan: 1 device x 2 micro-batches, and 2 replicas x 1.
  compile two-mb clusters/local-1.xml "${gray[@]}" --micro-batches 2
  compile two-replicas clusters/local-4.xml "${gray[@]}" --stages 1 --replicas 2 --micro-batches 1 --compress none
  run=(--data "$work/sets/idx" --steps 4 --seed 3 --augment standard --threads 1)
  "$work/two-mb/cpu0/fusion-cpu0" "${run[@]}" >"$work/two-mb.out" 2>&1 && pass || fail "2 micro-batches: $(tail -3 "$work/two-mb.out")"
  if "$work/two-replicas/launch-local.sh" "${run[@]}" >"$work/two-replicas.out" 2>&1; then pass
  else fail "2 replicas: $(tail -5 "$work/two-replicas.out")"; fi
  reporter=$(sed -n 's/^reporter=//p' "$work/two-replicas/launch-local.sh")
  losses "$work/two-mb.out" >"$work/a.loss"
  losses "$work/two-replicas/logs/$reporter.log" >"$work/b.loss"
  expect_eq "2 replicas: steps" 4 "$(wc -l <"$work/b.loss")"
  losses_within "2 replicas against 2 micro-batches, augmented" "$work/a.loss" "$work/b.loss"
  "$work/two-mb/cpu0/fusion-cpu0" --data "$work/sets/idx" --steps 4 --seed 3 --threads 1 >"$work/plain.out" 2>&1
  [ "$(losses "$work/plain.out" | tail -1)" != "$(tail -1 "$work/a.loss")" ] && pass ||
    fail "--augment standard changed no loss"
  # The validation on a 3-stage pipeline.
  compile three-stages clusters/local-4.xml "${gray[@]}" --stages 3 --replicas 1 --micro-batches 1 --compress none
  if "$work/three-stages/launch-local.sh" "${val[@]}" >"$work/three.out" 2>&1; then pass
  else fail "3 stages with validation: $(tail -5 "$work/three.out")"; fi
  reporter=$(sed -n 's/^reporter=//p' "$work/three-stages/launch-local.sh")
  awk '/val_loss/ { for (i = 1; i < NF; i++) if ($i == "val_loss") print $(i + 1) }' "$work/val.out" >"$work/one.val"
  awk '/val_loss/ { for (i = 1; i < NF; i++) if ($i == "val_loss") print $(i + 1) }' "$work/three-stages/logs/$reporter.log" >"$work/three.val"
  losses "$work/val.out" >"$work/one.loss"
  losses "$work/three-stages/logs/$reporter.log" >"$work/three.loss"
  losses_within "3 stages' losses against one device's" "$work/one.loss" "$work/three.loss"
  losses_within "3 stages' val_loss against one device's" "$work/one.val" "$work/three.val"
  awk '/val_loss/ { for (i = 1; i < NF; i++) if ($i == "val_acc") print $(i + 1) }' "$work/three-stages/logs/$reporter.log" >"$work/three.acc"
  expect_eq "3 stages' val_acc" "$(cat "$work/one.acc")" "$(cat "$work/three.acc")"
fi

# refused NAME PROGRAM DATA MESSAGE...: exit 1 and each MESSAGE in its error line.
refused() {
  local name=$1 prog=$2 data=$3 m
  shift 3
  "$prog" --data "$data" --steps 1 >"$work/$name.out" 2>&1
  expect_eq "$name: exit status" 1 "$?"
  for m in "$@"; do
    grep -qF -- "$m" "$work/$name.out" && pass || fail "$name: '$m' not in: $(tail -2 "$work/$name.out")"
  done
}
refused cut "$gray1" "$work/sets/bad-cut" "bad-cut/train-images-idx3-ubyte.gz: " "it is cut short"
head -c 20000 "$work/sets/idx/train-images-idx3-ubyte.gz" >"$work/sets/bad-cut/train-images-idx3-ubyte.gz"
refused gzip-cut "$gray1" "$work/sets/bad-cut" "train-images-idx3-ubyte.gz: its gzip stream is cut short"
refused count "$gray1" "$work/sets/bad-count" "bad-count/train-labels-idx1-ubyte: 63 labels, but" "has 64 images"
refused folder-junk "$rgb1" "$work/sets/bad-folder" "bad-folder/train/bee/notes.txt: not an image that can be decoded"
refused cifar-cut "$rgb1" "$work/sets/bad-cifar" "bad-cifar/data_batch_3.bin: " "not a whole number of CIFAR-10 records"
refused classes "$work/two-classes/cpu0/fusion-cpu0" "$work/sets/idx" "outside the model's 2 classes"
mkdir -p "$work/sets/train-only" && cp -r "$work/sets/folder/train" "$work/sets/train-only/"
"$rgb1" --data "$work/sets/train-only" --val-data "$work/sets/train-only" --val-every 1 --steps 1 >"$work/trainonly.out" 2>&1
expect_eq "an ImageFolder without a held-out split: exit status" 1 "$?"
grep -q "train-only: it has train/ but no test/ or val/" "$work/trainonly.out" && pass ||
  fail "an ImageFolder without a held-out split: $(tail -2 "$work/trainonly.out")"
echo "some text" >"$work/sets/notes.txt"
refused not-images "$gray1" "$work/sets/notes.txt" "sets/notes.txt: not an image dataset"
refused missing "$gray1" "$work/sets/nothing" "sets/nothing: cannot open it: No such file or directory"
finish
