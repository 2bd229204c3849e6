"""What the served task decides before any request: the settings it accepts, the model kind
it loads, and how a chat its model's own template refuses is answered."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_pipeline.errors import ServeError
from llm_pipeline.serve.app import load_served_model
from llm_pipeline.serve.settings import Settings, load_settings, serving_env
from llm_pipeline.tasks import InstanceError, get_task


def test_the_deploy_steps_environment_names_the_task_and_its_defaults() -> None:
    env = serving_env(
        task="instruction_tuning", parameters={"temperature": 0.7, "stop": ["\n\n", "###"]}
    )
    assert env["LLM_PIPELINE_SERVE_TASK"] == "instruction_tuning"
    settings = load_settings(env)
    assert settings.task == "instruction_tuning"
    assert settings.parameters.temperature == 0.7
    assert settings.parameters.stop == ("\n\n", "###")
    assert load_settings({}).task == "summarization"  # a server nobody told


def test_default_parameters_the_task_does_not_take_are_refused() -> None:
    env = serving_env(task="instruction_tuning", parameters={"num_beams": 4, "max_new_tokens": 9})
    with pytest.raises(ServeError) as refused:
        load_settings(env)
    assert (
        "LLM_PIPELINE_SERVE_PARAMETERS: num_beams: not a parameter of task "
        "'instruction_tuning' (it takes max_new_tokens, temperature, top_p, stop)"
    ) in str(refused.value)
    with pytest.raises(ServeError, match="temperature: not a parameter of task 'summarization'"):
        load_settings(serving_env(task="summarization", parameters={"temperature": 0.5}))


@pytest.fixture(scope="module")
def seq2seq_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random T5 with MiniLM's tokenizer, saved as the finetune step saves one."""
    from transformers import AutoTokenizer, T5Config, T5ForConditionalGeneration

    from .tiny_model import minilm_dir

    folder = tmp_path_factory.mktemp("t5")
    tokenizer = AutoTokenizer.from_pretrained(minilm_dir())
    config = T5Config(vocab_size=len(tokenizer), d_model=8, d_ff=8, num_layers=1, num_heads=1)
    T5ForConditionalGeneration(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    ("task", "model", "says"),
    [
        ("instruction_tuning", "seq2seq_dir", "not a causal LM"),
        ("summarization", "causal_lm_dir", "not a seq2seq checkpoint"),
        ("text_classification", "seq2seq_dir", "not a sequence classifier"),
        ("text_classification", "causal_lm_dir", "not a sequence classifier"),
        ("summarization", "classifier_dir", "not a seq2seq checkpoint"),
        # transformers maps "bert" to a causal LM; the saved head says otherwise.
        ("instruction_tuning", "classifier_dir", "not a causal LM"),
    ],
)
def test_a_model_of_the_other_kind_is_refused_naming_the_task(
    task: str, model: str, says: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    folder = request.getfixturevalue(model)
    settings = Settings(model_uri=str(folder), task=task, device="cpu")
    with pytest.raises(ServeError) as refused:
        load_served_model(settings, download_dir=tmp_path)
    message = str(refused.value)
    assert says in message
    assert f"this server serves task {task!r}, LLM_PIPELINE_SERVE_TASK" in message


def test_a_chat_the_models_own_template_refuses_is_the_clients_to_fix(
    causal_lm_dir: Path,
) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(causal_lm_dir)
    # As Llama 2's template does: user and assistant turns must alternate.
    tokenizer.chat_template = (
        "{% for m in messages %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant') }}"
        "{% endif %}[{{ m['role'] }}] {{ m['content'] }} {% endfor %}"
    )
    task = get_task("instruction_tuning")
    prompt = task.serving_prompter(tokenizer, prefix="", chat_template=None)
    chat = task.serving_instance({"messages": [{"role": "user", "content": "Hi"}]})
    assert prompt(chat) == "[user] Hi "
    twice = task.serving_instance(
        {"messages": [{"role": "user", "content": "Hi"}, {"role": "user", "content": "Hi?"}]}
    )
    with pytest.raises(InstanceError) as refused:
        prompt(twice)
    assert refused.value.where == ("messages",)
    assert "the model's chat template refuses this chat: Conversation roles must alternate" in (
        refused.value.what
    )


def test_the_servers_chat_template_is_trainings_for_a_tokenizer_without_one(
    causal_lm_dir: Path,
) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(causal_lm_dir)
    task = get_task("instruction_tuning")
    chat = task.serving_instance("What does heapq do?")
    plain = task.serving_prompter(tokenizer, prefix="", chat_template=None)
    assert plain(chat) == "### Instruction:\nWhat does heapq do?\n\n### Response:\n"
    configured = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}<assistant>"
    assert load_settings(serving_env(chat_template=configured)).chat_template == configured
    rendered = task.serving_prompter(tokenizer, prefix="", chat_template=configured)
    assert rendered(chat) == "<user>What does heapq do?<assistant>"
