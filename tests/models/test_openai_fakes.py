"""The fakes of OpenAI's APIs, through the real SDK client: what they refuse, as the APIs do.

A fake that let a bad request through would let ``OpenAIModel`` send it to the real API; each
case here is one the real API refuses.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

from . import _chat_api as chat
from . import _responses_api as responses
from ._openai_fake import ScriptError

MODEL = "gpt-5-mini"
FN: Any = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
CALLED: Any = {
    "role": "assistant",
    "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    ],
}
USER: Any = {"role": "user", "content": "hi"}


async def chat_refuses(**request: Any) -> str:
    api = chat.ChatAPI()
    async with api.client() as client:
        with pytest.raises(openai.APIStatusError):
            await client.chat.completions.create(**{"model": MODEL, **request})
    assert api.rejections, "refused without a record"
    return str(api.rejections[-1].message)


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (
            {"messages": [USER], "extra_body": {"temprature": 1}},
            "temprature: Extra inputs are not permitted",
        ),
        ({"messages": []}, "Invalid 'messages': empty array"),
        (
            {"messages": [USER, {"role": "tool", "tool_call_id": "call_1", "content": "x"}]},
            "messages with role 'tool' must be a response to a preceeding message with "
            "'tool_calls'",
        ),
        (
            {"messages": [USER, CALLED, USER], "tools": [FN]},
            "The following tool_call_ids did not have response messages: call_1",
        ),
        (
            {
                "messages": [
                    USER,
                    CALLED,
                    {"role": "tool", "tool_call_id": "call_2", "content": "x"},
                ],
                "tools": [FN],
            },
            "messages with role 'tool' must be a response",
        ),
        (
            {"messages": [USER], "tools": [FN, FN]},
            "Duplicate tool name: 'f'",
        ),
        (
            {"messages": [USER], "tools": [{**FN, "function": {"name": "no spaces"}}]},
            "does not match pattern",
        ),
        ({"messages": [USER], "tool_choice": "auto"}, "'tool_choice' is only allowed when 'tools'"),
        (
            {"messages": [USER], "stream_options": {"include_usage": True}},
            "only allowed when 'stream' is enabled",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "file:///x.png"}}],
                    }
                ]
            },
            "expected an https or data:image URL",
        ),
        (
            {
                "messages": [
                    USER,
                    {**CALLED, "tool_calls": [{"id": "c", "function": {"name": "f"}}]},
                ]
            },
            "Unable to extract tag using discriminator 'type'",
        ),
    ],
)
async def test_chat_refuses_what_the_api_refuses(request_: dict[str, Any], message: str) -> None:
    assert message in await chat_refuses(**request_)


async def chat_answers(script: chat.Answer, **request: Any) -> None:
    api = chat.ChatAPI(script)
    async with api.client() as client:
        await client.chat.completions.create(**{"model": MODEL, "messages": [USER], **request})


async def test_chat_a_script_the_model_could_not_give_fails_the_test() -> None:
    with pytest.raises(Exception, match="did not define"):
        await chat_answers(chat.answer(chat.call("c", "g", {})), tools=[FN])
    with pytest.raises(Exception, match="one call at most"):
        await chat_answers(
            chat.answer(chat.call("a", "f", {}), chat.call("b", "f", {})),
            tools=[FN],
            parallel_tool_calls=False,
        )
    with pytest.raises(ScriptError, match="finish_reason 'tool_calls'"):
        chat.answer("hi", finish_reason="tool_calls")


async def test_chat_an_unscripted_request_fails_the_test() -> None:
    api = chat.ChatAPI(chat.answer("one"), chat.answer("two"))
    async with api.client() as client:
        await client.chat.completions.create(model=MODEL, messages=[USER])
    with pytest.raises(AssertionError, match="1 scripted answer"):
        api.assert_all_answered()


RFN: Any = {"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": False}


async def issued(*items: Any, include: bool = True) -> list[dict[str, Any]]:
    """What the fake answers a first request with, as input items to send back."""
    api = responses.ResponsesAPI(responses.answer(*items))
    extra = {"include": ["reasoning.encrypted_content"]} if include else {}
    async with api.client() as client:
        create: Any = client.responses.create
        response = await create(model=MODEL, input="hi", tools=[RFN], **extra)
    return [item.model_dump(mode="json", exclude_none=True) for item in response.output]


async def responses_refuses(**request: Any) -> str:
    api = responses.ResponsesAPI()
    async with api.client() as client:
        with pytest.raises(openai.APIStatusError):
            await client.responses.create(**{"model": MODEL, "tools": [RFN], **request})
    return str(api.rejections[-1].message)


async def test_responses_pairs_reasoning_with_what_followed_it() -> None:
    rs, fc = await issued(responses.reasoning("r"), responses.function_call("call_1", "f", {}))
    output = {"type": "function_call_output", "call_id": "call_1", "output": "ok"}
    api = responses.ResponsesAPI(responses.answer("fine"))
    async with api.client() as client:  # the whole turn, in order: accepted
        create: Any = client.responses.create
        await create(model=MODEL, tools=[RFN], input=[USER, rs, fc, output])
    assert "without its required following item" in await responses_refuses(input=[USER, rs])
    assert f"without its required 'reasoning' item: '{rs['id']}'" in await responses_refuses(
        input=[fc, output]
    )
    tampered = {**rs, "summary": [{"type": "summary_text", "text": "changed"}]}
    assert "could not be verified" in await responses_refuses(input=[tampered, fc, output])
    bare = {k: v for k, v in rs.items() if k != "encrypted_content"}
    assert "Items are not persisted" in await responses_refuses(
        input=[bare, fc, output], store=False
    )


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (
            {"input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]},
            "No tool call found for function call output with call_id c.",
        ),
        (
            {"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]},
            "No tool output found for function call c.",
        ),
        (
            {"input": "hi", "tools": [{"type": "function", "name": "f", "parameters": {}}]},
            "tools.0.function.strict: Field required",
        ),
        ({"input": "hi", "max_output_tokens": 8}, "Expected a value >= 16"),
        ({"input": []}, "Invalid 'input': empty"),
        (
            {
                "input": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "input_image", "image_url": "data:image/png;base64,AA"}
                        ],
                    }
                ]
            },
            "detail: Field required",
        ),
        (
            {"input": [{"type": "reasoning", "id": "rs_other", "summary": []}]},
            "Item with id 'rs_other' not found.",
        ),
    ],
)
async def test_responses_refuses_what_the_api_refuses(
    request_: dict[str, Any], message: str
) -> None:
    assert message in await responses_refuses(**request_)


def test_responses_a_reasoning_item_is_followed_by_something() -> None:
    api = responses.ResponsesAPI()
    with pytest.raises(ScriptError, match="followed by a message or a function call"):
        api.answer(responses.answer(responses.reasoning("r")), {"model": MODEL, "input": "hi"})
