"""aurad's OpenAI-compatible endpoint driven by the official `openai` package.

Run by tests/openai_compat.rs, which starts aurad with a scripted mock model
(its replies, in the order the steps below ask for them, are listed there)
and checks what the model was sent. Usage:

    python3 openai_client.py BASE_URL TOKEN

BASE_URL is aurad's address with /v1 (http://127.0.0.1:PORT/v1). Each step
asserts what the client got; the first failure exits non-zero with a
traceback. Prints the session id it created, as `session <id>`.
"""

import json
import sys
import urllib.request

import openai


def main() -> None:
    base_url, token = sys.argv[1], sys.argv[2]
    client = openai.OpenAI(base_url=base_url, api_key=token, max_retries=0, timeout=30)

    # The agents that can hold a conversation are the models.
    models = [m.id for m in client.models.list()]
    assert models == ["a"], models
    model = client.models.retrieve("a")
    assert (model.id, model.object, model.owned_by) == ("a", "model", "aurad"), model

    # Not streamed.
    completion = client.chat.completions.create(
        model="a", messages=[{"role": "user", "content": "hello"}], temperature=0.2
    )
    assert completion.object == "chat.completion", completion
    assert completion.id.startswith("chatcmpl-"), completion.id
    assert completion.model == "a", completion
    choice = completion.choices[0]
    assert choice.message.role == "assistant", choice
    assert choice.message.content == "Hi there.", choice
    assert choice.finish_reason == "stop", choice
    usage = completion.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (10, 5, 15), usage

    # Streamed: the content assembled from the chunks, the usage in the last.
    chunks = list(
        client.chat.completions.create(
            model="a",
            messages=[{"role": "user", "content": "stream it"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == "streamed answer", chunks
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) > 1, chunks
    assert chunks[0].choices[0].delta.role == "assistant", chunks[0]
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == ["stop"], chunks
    last = chunks[-1]
    assert last.choices == [] and last.usage.total_tokens == 15, last
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)

    # Stateless: the client's earlier messages are the conversation.
    completion = client.chat.completions.create(
        model="a",
        messages=[
            {"role": "system", "content": "Call me by my name."},
            {"role": "user", "content": "My name is Ada."},
            {"role": "assistant", "content": "Hello Ada."},
            {"role": "user", "content": "What is my name?"},
        ],
    )
    assert completion.choices[0].message.content == "Your name is Ada.", completion

    # The agent's tools run inside aurad; the client gets the answer.
    completion = client.chat.completions.create(
        model="a", messages=[{"role": "user", "content": "what is 6*7?"}]
    )
    assert completion.choices[0].message.content == "It is 42.", completion
    assert completion.usage.total_tokens == 30, completion.usage

    # A stored session, named by a header: the client's other messages are
    # not read, the session's are.
    request = urllib.request.Request(
        base_url + "/agents/a/sessions",
        data=b"{}",
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request) as answer:
        session = json.load(answer)["id"]
    print(f"session {session}", flush=True)
    in_session = {"X-Aurad-Session": session}
    completion = client.chat.completions.create(
        model="a", messages=[{"role": "user", "content": "one"}], extra_headers=in_session
    )
    assert completion.choices[0].message.content == "first answer", completion
    chunks = client.chat.completions.create(
        model="a",
        messages=[
            {"role": "user", "content": "not read"},
            {"role": "assistant", "content": "not read either"},
            {"role": "user", "content": "two"},
        ],
        extra_headers=in_session,
        stream=True,
    )
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == "second answer", content

    # A run that fails: an error, streamed or not.
    try:
        client.chat.completions.create(model="a", messages=[{"role": "user", "content": "fail"}])
        raise AssertionError("a failed run answered")
    except openai.InternalServerError as e:
        assert e.status_code == 500 and e.code == "failed", (e.status_code, e.body)
        assert "GET /v1/runs/" in e.message, e.message
    try:
        for _ in client.chat.completions.create(
            model="a", messages=[{"role": "user", "content": "fail"}], stream=True
        ):
            pass
        raise AssertionError("a failed streamed run ended well")
    except openai.APIError as e:
        assert "ended failed" in e.message, e.message

    # Errors in OpenAI's shape, as the client's exceptions.
    try:
        client.chat.completions.create(model="nobody", messages=[{"role": "user", "content": "hi"}])
        raise AssertionError("an unknown model answered")
    except openai.NotFoundError as e:
        assert e.code == "model_not_found", e.body
        assert "GET /v1/models" in e.message, e.message
    try:
        client.chat.completions.create(model="a", messages=[{"role": "user", "content": "hi"}], n=2)
        raise AssertionError("n=2 answered")
    except openai.BadRequestError as e:
        assert e.param == "n", e.body
    # No token (the client always sends one: its header is left out), and
    # a wrong one.
    for key, headers, said in [
        ("unused", {"Authorization": openai.Omit()}, "needs a bearer token"),
        ("wrong-token", {}, "bearer token is wrong"),
    ]:
        other = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
        try:
            other.models.list(extra_headers=headers)
            raise AssertionError(f"the key {key!r} was let in")
        except openai.AuthenticationError as e:
            assert e.type == "authentication_error", e.body
            assert said in e.message, e.message
    print("ok", flush=True)


if __name__ == "__main__":
    main()
