# fusionc launch --slurm against a real Slurm started here: Debian's
# slurmctld and four slurmd (nodes n1-n4, all on this machine, each on its
# own port) with munge, in this test's folder, on ports of its own:
#   - a small GPT compiled for local-4 as 2 stages x 2 replicas (Megatron's
#     placement: every device works) trains 10 steps through sbatch and
#     srun, each device a task on the node of its host (n1-n4), and every
#     loss equals launch-local.sh's, to the printed digit;
#   - --sbatch=--nodes=2 puts the four hosts on two nodes (host i on node
#     i mod 2): the same losses;
#   - a job the partition cannot hold (a node a host, with a 3-node
#     partition limit) is cancelled with a message saying what to change,
#     not left waiting;
#   - `fusionc stop OUT` cancels a running job (launched in the foreground
#     elsewhere): every device finishes the same step and saves it, the
#     launch exits 1 saying the job was cancelled, no device is left;
#     --detach returns at once and stop then says the job has ended;
#   - a device killed in the middle of a run: launch exits 1, naming it
#     and how it ended (srun's word), and the others.
# Needs root and slurmctld, slurmd, slurm-client and munge
# (scripts/install-deps.sh); without them it FAILS, naming what is missing.
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs

for tool in slurmctld slurmd sbatch srun scontrol scancel sinfo munged; do
  command -v "$tool" >/dev/null || PATH=$PATH:/usr/sbin command -v "$tool" >/dev/null ||
    { fail "$tool is missing (scripts/install-deps.sh installs slurmctld slurmd slurm-client munge)"; finish; exit 1; }
done
export PATH=$PATH:/usr/sbin
[ "$(id -u)" -eq 0 ] || { fail "needs root (slurmd runs the devices' tasks as their user)"; finish; exit 1; }
claim_ports

# --- a Slurm of this test's own -------------------------------------------
S=$work/slurm
mkdir -p "$S/state" "$S"/spool-n{1,2,3,4}
node_host=$(hostname -s)
dd if=/dev/urandom of="$S/munge.key" bs=1024 count=1 status=none && chmod 600 "$S/munge.key"
slurm_down() {
  scancel --full --quiet "$(cat "$work/run/slurm/job-id" 2>/dev/null || echo 0)" 2>/dev/null
  for f in "$S"/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; done
  pkill -f "$work/run/cpu-" 2>/dev/null
  sleep 0.5
}
trap 'slurm_down; rm -rf "$work"; release_ports' EXIT
munged -S "$S/munge.sock" --key-file "$S/munge.key" --pid-file "$S/munged.pid" --log-file "$S/munged.log" \
  --seed-file "$S/munge.seed" -f && pass || fail "munged did not start: $(tail -3 "$S/munged.log")"
cat >"$S/slurm.conf" <<EOF
ClusterName=fusiontest
SlurmctldHost=$node_host
AuthType=auth/munge
AuthInfo=socket=$S/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$((ports + 9800))
StateSaveLocation=$S/state
SlurmctldPidFile=$S/slurmctld.pid
SlurmctldLogFile=$S/slurmctld.log
SlurmdSpoolDir=$S/spool-%n
SlurmdPidFile=$S/slurmd-%n.pid
SlurmdLogFile=$S/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
KillWait=10
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SlurmdParameters=config_overrides
NodeName=n[1-4] NodeHostname=$node_host NodeAddr=127.0.0.1 Port=$((ports + 9801))-$((ports + 9804)) CPUs=2 RealMemory=1000
PartitionName=all Nodes=n[1-4] Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
PartitionName=small Nodes=n[1-4] MaxNodes=3 MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
export SLURM_CONF=$S/slurm.conf
slurmctld -f "$SLURM_CONF" && pass || fail "slurmctld did not start: $(tail -3 "$S/slurmctld.log")"
for n in 1 2 3 4; do slurmd -f "$SLURM_CONF" -N "n$n" || fail "slurmd n$n did not start"; done
for _ in $(seq 100); do [ "$(sinfo -h -p all -o %T 2>/dev/null)" = idle ] && break; sleep 0.2; done
expect_eq "the four nodes, idle" "idle" "$(sinfo -h -p all -o %T 2>&1)"

# --- the run, and launch-local.sh's ----------------------------------------
cat /usr/share/common-licenses/* >"$work/corpus.txt"
"$FUSIONC" compile models/gpt2.xml clusters/local-4.xml --scheduler megatron -o "$work/run" --set layers=4 \
  --set dim=64 --set heads=2 --set vocab=256 --set ctx=32 --set seq=32 --set batch=8 >"$work/compile.out" 2>&1 &&
  grep -q '2 stages x 2 replicas' "$work/compile.out" && pass || fail "compile: $(cat "$work/compile.out")"
args=(--data "$work/corpus.txt" --steps 10 --seed 3 --port-base "$ports")
losses() { sed -n 's/^.*step *\([0-9]*\)\/[0-9]* *loss \([0-9.]*\).*/\1 \2/p' "$1"; }
"$work/run/launch-local.sh" "${args[@]}" >"$work/local.out" 2>&1 && pass || fail "launch-local.sh: $(tail -3 "$work/local.out")"
losses "$work/local.out" >"$work/local.losses"
expect_eq "launch-local's steps" 10 "$(wc -l <"$work/local.losses")"

cd "$work"   # the job runs where launch was called, as launch-local.sh runs where it is called
"$FUSIONC" launch run --slurm -- "${args[@]}" >"$work/slurm.out" 2>&1 && pass ||
  fail "launch --slurm: $(tail -5 "$work/slurm.out")"
losses "$work/slurm.out" >"$work/slurm.losses"
expect_eq "the losses through sbatch and srun" "$(cat "$work/local.losses")" "$(cat "$work/slurm.losses")"
job=$(cat run/slurm/job-id)
expect_eq "the job's end" COMPLETED "$(scontrol show job -o "$job" | sed -n 's/.* JobState=\([A-Z]*\).*/\1/p')"
expect_eq "each device a task on its host's node" \
  "cpu-a0 on n1|cpu-a1 on n2|cpu-b0 on n3|cpu-b1 on n4" \
  "$(sed -n 's/^job.sh: \(cpu-.. on n.\) .*/\1/p' "run/logs/slurm-$job.out" | paste -sd'|')"
for d in cpu-a0 cpu-a1 cpu-b0 cpu-b1; do
  n=$(sed -n "s/^job.sh: device $d is task . of job $job on node \(n.\)$/\1/p" "run/logs/$d.log")
  [ -n "$n" ] && pass || fail "$d's log does not say which task and node ran it: $(head -2 "run/logs/$d.log")"
done
grep -q "^launch: training completed on 4 devices (Slurm job $job" slurm.out && pass || fail "no completion line"

"$FUSIONC" launch run --slurm --sbatch=--nodes=2 -- "${args[@]}" >"$work/two.out" 2>&1 && pass ||
  fail "launch --slurm --sbatch=--nodes=2: $(tail -5 "$work/two.out")"
losses "$work/two.out" >"$work/two.losses"
expect_eq "the losses on two nodes" "$(cat "$work/local.losses")" "$(cat "$work/two.losses")"
job=$(cat run/slurm/job-id)
expect_eq "hosts on nodes i mod 2" "cpu-a0 on n1|cpu-a1 on n2|cpu-b0 on n1|cpu-b1 on n2" \
  "$(sed -n 's/^job.sh: \(cpu-.. on n.\) .*/\1/p' "run/logs/slurm-$job.out" | paste -sd'|')"

# --- a job that cannot run --------------------------------------------------
rc=0
timeout 60 "$FUSIONC" launch run --slurm --sbatch=--partition=small -- "${args[@]}" >"$work/small.out" 2>&1 || rc=$?
expect_eq "a job the partition cannot hold: exit" 1 "$rc"
grep -q "cannot run: Slurm says Partition[A-Za-z]* (.*--sbatch=--nodes=K.*cancelling it" small.out && pass ||
  fail "no clear refusal: $(cat small.out)"
grep -q "device cpu-a0 did not finish (job [0-9]* CANCELLED): it never started" small.out && pass ||
  fail "the devices that never started are not named: $(cat small.out)"
rc=0
"$FUSIONC" launch run --sbatch=--nodes=1 -- "${args[@]}" >"$work/usage.out" 2>&1 || rc=$?
expect_eq "--sbatch without --slurm: exit" 2 "$rc"
grep -q "\-\-sbatch and --detach go with --slurm" usage.out && pass || fail "usage: $(cat usage.out)"

# --- stop -------------------------------------------------------------------
long=(--data "$work/corpus.txt" --steps 100000 --seed 3 --port-base "$ports" --save "$work/ckpt")
rm -f run/logs/*.log   # what the waits below read: this run's logs only
"$FUSIONC" launch run --slurm -- "${long[@]}" >"$work/long.out" 2>&1 &
launcher=$!
for _ in $(seq 300); do grep -q "step *20/" run/logs/cpu-b0.log 2>/dev/null && break; sleep 0.1; done
"$FUSIONC" stop run >"$work/stop.out" 2>&1 && pass || fail "stop: $(cat stop.out)"
grep -q "^stop: Slurm job [0-9]* of run cancelled (CANCELLED)" stop.out && pass || fail "stop said: $(cat stop.out)"
rc=0
wait "$launcher" || rc=$?
expect_eq "the stopped launch's exit" 1 "$rc"
grep -q "training did not complete: job [0-9]* CANCELLED" long.out && pass || fail "launch said: $(tail -5 long.out)"
stopped=$(sed -n 's/^fusion: stopped by SIGTERM after step \([0-9]*\).*/\1/p' run/logs/cpu-*.log | sort -u)
[ -n "$stopped" ] && [ "$(echo "$stopped" | wc -l)" = 1 ] && [ -d "ckpt/step-$stopped" ] &&
  [ "$(ls "ckpt/step-$stopped"/checkpoint-*.safetensors | wc -l)" = 4 ] && pass ||
  fail "the devices did not all stop at one step and save it (steps '$stopped'; $(ls ckpt 2>&1 | paste -sd' '))"
pgrep -f "$work/run/cpu-" >/dev/null && fail "devices still run after stop: $(pgrep -af "$work/run/cpu-")" || pass
"$FUSIONC" launch run --slurm --detach -- "${args[@]}" >"$work/detach.out" 2>&1 && pass || fail "detach: $(cat detach.out)"
grep -q "^launch: detached; \`fusionc stop run\` cancels it" detach.out && pass || fail "detach said: $(cat detach.out)"
job=$(cat run/slurm/job-id)
for _ in $(seq 300); do scontrol show job -o "$job" | grep -q "JobState=COMPLETED" && break; sleep 0.1; done
"$FUSIONC" stop run >"$work/stop2.out" 2>&1 && pass || fail "stop of an ended job: $(cat stop2.out)"
grep -q "^stop: Slurm job $job of run has already ended (COMPLETED)" stop2.out && pass || fail "stop said: $(cat stop2.out)"

# --- a device killed ----------------------------------------------------------
rc=0
rm -f run/logs/*.log
timeout 120 "$FUSIONC" launch run --slurm -- "${args[@]}" --steps 100000 --peer-timeout 3 >"$work/crash.out" 2>&1 &
launcher=$!
for _ in $(seq 300); do grep -q "step *5/" run/logs/cpu-b0.log 2>/dev/null && break; sleep 0.1; done
pkill -KILL -f "$work/run/cpu-b1/fusion-cpu-b1" && pass || fail "no cpu-b1 to kill"
wait "$launcher" || rc=$?
expect_eq "a killed device: exit" 1 "$rc"
grep -q "device cpu-b1 Killed (job [0-9]* FAILED)" crash.out && pass || fail "the killed device is not named: $(tail -6 crash.out)"
grep -q "device cpu-b0 Exited with exit code [1-9]" crash.out && pass || fail "its peers' ends are not named: $(tail -6 crash.out)"
grep -q "training did not complete: job [0-9]* FAILED" crash.out && pass || fail "launch said: $(tail -3 crash.out)"
cd "$FUSION_SOURCE_DIR"
finish
