# fusionc serve (tools/serve.c) and its worker (runtime/serve_worker.c):
# a tiny Llama trained 300 steps and exported, served on this test's port.
#  - the official OpenAI client for Node (npm's `openai`, pinned, installed
#    into the build folder by tests/serve/install_openai.sh) streams a
#    greedy completion whose text is `fusionc generate`'s, finish reason
#    "length"; and gets 20 concurrent chat answers, each an assistant
#    message of 8 tokens;
#  - curl: /v1/models names the model; a completion without streaming has
#    generate's text and the usage counts; streamed, the chunks join to the
#    same text and end with data: [DONE]; a stop text ends it before it;
#  - the worker alone: four requests in one step batch, two of them the
#    same prompt, each with the tokens of one request alone; a bad id
#    refused, the others answered;
#  - bad input gets its 4xx with a JSON error and the next request is
#    answered: bad JSON (400), a field of the wrong type (400), a body over
#    --max-body (413), a prompt longer than the context (400), an unknown
#    route (404);
#  - over two stages of local-4 (the last one the worker, the first taking
#    its steps over a sealed link), with --api-key: 401 without the bearer
#    and 200 with it; five concurrent completions, each generate's text;
#    with --chat-template, a chat answered as generate answers the
#    template's text;
#    no device program left when the server stops.
. "$(dirname "$0")/lib.sh"
build=${FUSION_BUILD_DIR:?}
claim_ports
py=/usr/bin/python3
export FUSION_CACHE_DIR=$work/cache
if ! out=$(tests/serve/install_openai.sh "$build" 2>&1); then
  fail "installing the OpenAI client: $out"
  finish
fi
export FUSION_NPM_OPENAI=$build/npm-openai
cat /usr/share/common-licenses/* >"$work/corpus.txt"
llama=(models/llama.xml --set vocab=256 --set ctx=64 --set layers=2 --set dim=64 --set heads=4 --set kv_heads=2
       --set ffn=172)
"$FUSIONC" compile "${llama[@]}" --set batch=8 --set seq=32 --set lr=3e-3 clusters/local-1.xml -o "$work/train" \
  >/dev/null 2>&1 || fail "compile for training"
"$work/train/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps 300 --save "$work/ck" >/dev/null 2>&1 || fail "training"
"$FUSIONC" export "$work/ck" -o "$work/hf" >/dev/null 2>&1 || fail "export"
prompt="The GNU General"
"$FUSIONC" generate "${llama[@]}" clusters/local-1.xml --init "$work/hf" --prompt "$prompt" --max-tokens 40 \
  --temperature 0 >"$work/want" 2>/dev/null || fail "generate"
want=$(cat "$work/want")

port=$((ports + 1))
url=http://127.0.0.1:$port/v1
"$FUSIONC" serve "${llama[@]}" clusters/local-1.xml --init "$work/hf" --port $port --max-body 4096 \
  >"$work/serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null' EXIT
up() { for _ in $(seq 100); do curl -sf "$1/models" >/dev/null 2>&1 && return 0; sleep 0.1; done; return 1; }
up "$url" && pass || fail "the server did not come up: $(cat "$work/serve.log")"

# ---- the official client
node tests/serve/openai_client.mjs "$url" stream "$prompt" 40 >"$work/client" 2>&1 && pass ||
  fail "the OpenAI client's stream: $(cat "$work/client")"
expect_eq "the OpenAI client's streamed text" "$want" "$(head -n -1 "$work/client")"
expect_eq "its finish reason" "length" "$(tail -1 "$work/client")"
expect_eq "20 concurrent chat answers through the OpenAI client" 20 \
  "$(node tests/serve/openai_client.mjs "$url" concurrent 20 8 2>&1)"

# ---- curl
"$py" - "$(curl -s "$url/models")" <<'PYEOF' && pass || fail "/v1/models"
import json, sys
d = json.loads(sys.argv[1]); sys.exit(0 if d["object"] == "list" and d["data"][0]["id"] == "llama" else 1)
PYEOF
body=$("$py" -c "import json,sys; print(json.dumps({'prompt': sys.argv[1], 'max_tokens': 40, 'temperature': 0}))" \
  "$prompt")
curl -s "$url/completions" -d "$body" >"$work/plain"
"$py" - "$work/plain" "$work/want" <<'PYEOF' && pass || fail "a completion: $(cat "$work/plain")"
import json, sys
d, want = json.load(open(sys.argv[1])), open(sys.argv[2]).read().rstrip("\n")
c = d["choices"][0]
ok = (d["object"] == "text_completion" and c["text"] == want and c["finish_reason"] == "length"
      and d["usage"] == {"prompt_tokens": 15, "completion_tokens": 40, "total_tokens": 55})
sys.exit(0 if ok else 1)
PYEOF
curl -s -N "$url/completions" -d "${body%\}}, \"stream\": true}" >"$work/sse"
"$py" - "$work/sse" "$work/want" <<'PYEOF' && pass || fail "a streamed completion: $(cat "$work/sse")"
import json, sys
events = [l[6:] for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ")]
want = open(sys.argv[2]).read().rstrip("\n")
text = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1])
sys.exit(0 if events[-1] == "[DONE]" and text == want else 1)
PYEOF
stop=${want:26:2}
curl -s "$url/completions" -d "${body%\}}, \"stop\": \"$stop\"}" >"$work/stopped"
"$py" - "$work/stopped" "$work/want" "$stop" <<'PYEOF' && pass || fail "a stop text: $(cat "$work/stopped")"
import json, sys
c = json.load(open(sys.argv[1]))["choices"][0]
want = open(sys.argv[2]).read().rstrip("\n").split(sys.argv[3])[0]
sys.exit(0 if c["text"] == want and c["finish_reason"] == "stop" else 1)
PYEOF

# ---- the worker alone: four requests batched in one program of 4 rows
prog=$(ls "$work"/cache/generate/*/cpu0/fusion-cpu0 | while read -r p; do
  grep -q "idx i32\[4,1\]" "$(dirname "$p")/manifest.txt" && echo "$p"; done | head -1)
ids=$("$py" -c "import sys; print(','.join(str(b) for b in sys.argv[1].encode()))" "$prompt")
printf '%s\n' "{\"id\":1,\"prompt\":[$ids],\"max_tokens\":40,\"temperature\":0}" \
  '{"id":2,"prompt":[84,104],"max_tokens":5,"temperature":0}' '{"id":3,"prompt":[1,999]}' \
  "{\"id\":4,\"prompt\":[$ids],\"max_tokens\":40,\"temperature\":0}" |
  "$prog" --init "$work/hf" --serve >"$work/worker" 2>/dev/null && pass || fail "the worker"
tokens_of() { "$py" -c "
import json, sys
print(''.join(chr(d['token']) for d in map(json.loads, open(sys.argv[1])) if d.get('id') == int(sys.argv[2]) and 'token' in d))
" "$work/worker" "$1"; }
expect_eq "the worker: request 1 batched, generate's text" "$want" "$(tokens_of 1)"
expect_eq "the worker: request 4 beside it, the same" "$want" "$(tokens_of 4)"
grep -q '{"id":3,"error":"a prompt id is outside the vocabulary"}' "$work/worker" && pass ||
  fail "no refusal of request 3: $(grep '"id":3' "$work/worker")"
grep -q '{"id":2,"done":"length","prompt":2,"tokens":5}' "$work/worker" && pass || fail "request 2 did not end"

# ---- bad input, and the server goes on
status() { curl -s -o "$work/err" -w "%{http_code}" "$@"; }
expect_eq "bad JSON: status" 400 "$(status "$url/completions" -d '{"prompt": ')"
grep -q '"error":{"message":"the body is not a JSON object","type":"invalid_request_error"' "$work/err" && pass ||
  fail "no JSON error: $(cat "$work/err")"
expect_eq "max_tokens a string: status" 400 "$(status "$url/completions" -d '{"prompt": "x", "max_tokens": "9"}')"
grep -q "'max_tokens' must be a number" "$work/err" && pass || fail "no field error: $(cat "$work/err")"
expect_eq "a body over --max-body: status" 413 \
  "$(status "$url/completions" -d "{\"prompt\": \"$(head -c 5000 /dev/zero | tr '\0' a)\"}")"
expect_eq "a prompt longer than the context: status" 400 \
  "$(status "$url/completions" -d "{\"prompt\": \"$(head -c 100 /dev/zero | tr '\0' a)\"}")"
grep -q "the prompt is 100 tokens: it must be 1 to the context's 64" "$work/err" && pass ||
  fail "no context error: $(cat "$work/err")"
expect_eq "an unknown route: status" 404 "$(status "$url/embeddings" -d '{}')"
expect_eq "the next request is answered" 200 "$(status "$url/completions" -d '{"prompt": "GNU", "max_tokens": 3}')"

# ---- over two stages of local-4 (two processes, the activations over a
# sealed link), with a bearer key
kill $server 2>/dev/null
wait $server 2>/dev/null
port=$((ports + 2))
url=http://127.0.0.1:$port/v1
"$FUSIONC" serve "${llama[@]}" clusters/local-4.xml --stages 2 --compress none --port-base $((ports + 10)) \
  --init "$work/hf" --port $port --api-key s3cret --chat-template tests/chat/templates/chatml.jinja \
  >"$work/serve2.log" 2>&1 &
server=$!
up_key() { for _ in $(seq 100); do curl -sf -H "Authorization: Bearer s3cret" "$url/models" >/dev/null 2>&1 && return 0
  sleep 0.1; done; return 1; }
up_key && pass || fail "the keyed server did not come up: $(cat "$work/serve2.log")"
expect_eq "no bearer key: status" 401 "$(status "$url/completions" -d '{"prompt": "GNU", "max_tokens": 2}')"
expect_eq "the bearer key: status" 200 \
  "$(status -H "Authorization: Bearer s3cret" "$url/completions" -d '{"prompt": "GNU", "max_tokens": 2}')"
grep -q "fusion: serving: 4 rows, a context of 64 tokens, 256 ids, 2 stages" "$work/serve2.log" && pass ||
  fail "the worker is not the last of two stages: $(cat "$work/serve2.log")"
clients=()
for i in 1 2 3 4 5; do
  curl -s -H "Authorization: Bearer s3cret" "$url/completions" -d "$body" >"$work/two$i" &
  clients+=($!)
done
wait "${clients[@]}"
for i in 1 2 3 4 5; do
  "$py" -c "import json, sys; print(json.load(open(sys.argv[1]))['choices'][0]['text'])" "$work/two$i" \
    >"$work/two$i.text" 2>&1
done
expect_eq "two stages: five concurrent completions, each generate's text" \
  "$(for i in 1 2 3 4 5; do echo "$want"; done)" "$(cat "$work"/two[1-5].text)"
# --chat-template: a chat's prompt is the template's text (fusionc chat-template's)
printf '[{"role": "user", "content": "GNU"}]' >"$work/chat.json"
"$FUSIONC" chat-template --template tests/chat/templates/chatml.jinja --messages "$work/chat.json" >"$work/chat.prompt" ||
  fail "chat-template"
chat_ids=$(od -An -tu1 <"$work/chat.prompt" | tr -s ' \n' ',,' | sed 's/^,//;s/,$//') # its trailing newline too
"$FUSIONC" generate "${llama[@]}" clusters/local-1.xml --init "$work/hf" --prompt-ids "$chat_ids" \
  --max-tokens 8 --temperature 0 >"$work/chat.want" 2>/dev/null || fail "generate on the chat's prompt"
curl -s -H "Authorization: Bearer s3cret" "$url/chat/completions" \
  -d '{"messages": [{"role": "user", "content": "GNU"}], "max_tokens": 8, "temperature": 0}' >"$work/chat.got"
expect_eq "--chat-template: the answer is generate's on the template's text" "$(cat "$work/chat.want")" \
  "$("$py" -c "import json, sys; print(json.load(open(sys.argv[1]))['choices'][0]['message']['content'])" "$work/chat.got")"
kill $server 2>/dev/null
wait $server 2>/dev/null
[ -z "$(pgrep -f "$work/cache/generate/.*/fusion-cpu[0-9]")" ] && pass ||
  fail "device programs left running after the server: $(pgrep -fa "$work/cache/generate")"
finish
