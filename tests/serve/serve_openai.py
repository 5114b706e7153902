# SPDX-License-Identifier: MIT
"""nvfp4 serve driven by the real openai client (build/venv-serve):
completions and chat, streamed and not, structure and greedy output against
`nvfp4 generate`; errors as the client's exceptions.  argv: nvfp4 model workdir."""
import os
import sys
import threading

import openai

from serve_common import Server, check, finish, generate_ref

NVFP4, MODEL, WORK = sys.argv[1:4]
KEY = "sk-openai-test"
srv = Server(NVFP4, MODEL, os.path.join(WORK, "server.log"), "--api-key", KEY,
             "--served-model-name", "tiny-smol")
client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % srv.port, api_key=KEY,
                       max_retries=0, timeout=60)
try:
    models = client.models.list()
    check([m.id for m in models.data] == ["tiny-smol"], "models.list")

    prompt = "the quick brown fox"
    ref, ref_n = generate_ref(NVFP4, MODEL, prompt, 12)
    ref = ref.decode("utf-8", "replace")
    r = client.completions.create(model="tiny-smol", prompt=prompt, max_tokens=12,
                                  temperature=0)
    check(r.object == "text_completion" and r.model == "tiny-smol" and len(r.choices) == 1
          and r.choices[0].text == ref and r.choices[0].finish_reason in ("stop", "length")
          and r.usage.completion_tokens >= ref_n and r.usage.prompt_tokens > 0 and
          r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens,
          "completions.create equals generate")

    chunks = list(client.completions.create(model="tiny-smol", prompt=prompt, max_tokens=12,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    check(text == ref and chunks[-1].usage and chunks[-1].usage.completion_tokens >= ref_n
          and len({c.id for c in chunks}) == 1, "completions stream equals generate")

    msgs = [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Name a colour."}]
    r = client.chat.completions.create(model="tiny-smol", messages=msgs, max_tokens=8,
                                       temperature=0, logprobs=True, top_logprobs=2)
    m = r.choices[0].message
    check(r.object == "chat.completion" and m.role == "assistant" and
          isinstance(m.content, str) and r.choices[0].finish_reason in ("stop", "length") and
          r.usage.completion_tokens <= 8 and r.choices[0].logprobs is not None and
          all(len(t.top_logprobs) == 2 for t in r.choices[0].logprobs.content),
          "chat.completions.create")
    whole = m.content
    chunks = list(client.chat.completions.create(model="tiny-smol", messages=msgs,
                                                 max_tokens=8, temperature=0, stream=True))
    check(chunks[0].choices[0].delta.role == "assistant" and
          all(c.object == "chat.completion.chunk" for c in chunks) and
          "".join(c.choices[0].delta.content or "" for c in chunks) == whole and
          chunks[-1].choices[0].finish_reason in ("stop", "length"),
          "chat stream equals the whole response")

    # a few concurrent streams through the client
    prompts = ["a lazy dog", "seven wizards judge", "the old river bank near"]
    refs = [generate_ref(NVFP4, MODEL, p, 10)[0].decode("utf-8", "replace") for p in prompts]
    got = [None] * len(prompts)

    def run(i):
        got[i] = "".join(c.choices[0].text for c in client.completions.create(
            model="tiny-smol", prompt=prompts[i], max_tokens=10, temperature=0, stream=True))

    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    [t.start() for t in ts]
    [t.join(60) for t in ts]
    check(got == refs, "concurrent client streams equal generate")

    try:
        client.completions.create(model="tiny-smol", prompt="x", n=2)
        check(False, "n=2 refused")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and e.body and e.body.get("param") == "n", "n=2: 400, param n")
    try:
        client.completions.create(model="tiny-smol", prompt="x", temperature=9)
        check(False, "temperature 9 refused")
    except openai.BadRequestError as e:
        check(e.body.get("param") == "temperature", "temperature 9: 400, param temperature")
    try:
        client.chat.completions.create(model="tiny-smol", messages=msgs, tools=[{
            "type": "function", "function": {"name": "f", "parameters": {}}}])
        check(False, "tools refused")
    except openai.BadRequestError as e:
        check(e.body.get("param") == "tools", "tools: 400, param tools")
    try:
        client.completions.create(model="other", prompt="x")
        check(False, "unknown model refused")
    except openai.NotFoundError as e:
        check(e.status_code == 404, "unknown model: NotFoundError")
    bad = openai.OpenAI(base_url=client.base_url, api_key="wrong", max_retries=0)
    try:
        bad.models.list()
        check(False, "wrong key refused")
    except openai.AuthenticationError as e:
        check(e.status_code == 401, "wrong key: AuthenticationError")
finally:
    rc = srv.stop()
check(rc == 0, "clean exit")
finish()
