"""google-t5/t5-small's shape as the fit check sees it, written out for hand counts."""

from llm_pipeline.fit.shapes import ModelShape, Stack

# google-t5/t5-small: d_model 512, 8 heads of 64, d_ff 2048 (ReLU), 6 + 6 layers, dropout 0.1.
T5_SMALL_STACK = Stack(
    layers=6, hidden=512, inner=512, heads=8, ffn=2048, gated=False, dropout=True
)
T5_SMALL = ModelShape(
    name="t5-small",
    parameters=60_506_624,
    largest_layer_parameters=16_449_536,
    encoder_parameters=35_330_816,
    encoder=T5_SMALL_STACK,
    decoder=T5_SMALL_STACK,
    vocab=32128,
    default_max_length=20,
    default_num_beams=1,
    learned_attention_bias=True,  # T5's relative position bias: eager attention on CUDA
    model_type="t5",
    architecture="T5ForConditionalGeneration",
)
