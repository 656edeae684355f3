# fusionc stats gives the published parameter counts: GPT-2 (OpenAI's
# checkpoints) and ResNet (torchvision).
. "$(dirname "$0")/lib.sh"

params() {  # MODEL [--set k=v]... -> the parameter count without commas
  "$FUSIONC" stats "$@" 2>"$work/err" | awk '$1 == "parameters" { gsub(",", "", $2); print $2 }'
}

expect_eq "GPT-2 small"  124439808  "$(params models/gpt2.xml)"
expect_eq "GPT-2 medium" 354823168  "$(params models/gpt2.xml --set layers=24 --set dim=1024 --set heads=16)"
expect_eq "GPT-2 large"  774030080  "$(params models/gpt2.xml --set layers=36 --set dim=1280 --set heads=20)"
expect_eq "GPT-2 XL"     1557611200 "$(params models/gpt2.xml --set layers=48 --set dim=1600 --set heads=25)"
expect_eq "GPT-2 small, attention in parts" 124439808 "$(params models/gpt2.xml --set attn_parts=1)"
expect_eq "ResNet-18"    11689512   "$(params models/resnet.xml --set depth=18)"
expect_eq "ResNet-34"    21797672   "$(params models/resnet.xml --set depth=34)"
expect_eq "ResNet-50"    25557032   "$(params models/resnet.xml)"
expect_eq "ResNet-101"   44549160   "$(params models/resnet.xml --set depth=101)"
expect_eq "ResNet-152"   60192808   "$(params models/resnet.xml --set depth=152)"
# MLP 784-256-256-10: 784*256+256 + 256*256+256 + 256*10+10
expect_eq "MLP"          269322     "$(params models/mlp.xml)"

# FLOPs: GPT-2 small forward per sequence of 1024 tokens is about
# 2·N_nonembedding·T + 2·V·C·T (logits) + 4·L·T²·C (attention) ~ 0.29 TFLOP.
fwd=$("$FUSIONC" stats models/gpt2.xml | awk '$1 == "forward" { print $2 }')
awk -v f="$fwd" 'BEGIN { exit !(f > 280 && f < 300) }' && pass || fail "GPT-2 small forward GFLOP per sample: expected 280..300, found '$fwd'"
bwd=$("$FUSIONC" stats models/gpt2.xml | awk '$1 == "backward" { print $2 }')
awk -v f="$fwd" -v b="$bwd" 'BEGIN { exit !(b > 1.9 * f && b < 2.1 * f) }' && pass || fail "backward/forward FLOPs: expected about 2, found $bwd / $fwd"
finish
