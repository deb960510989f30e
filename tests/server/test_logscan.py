"""llama.cpp's own failure reason is found in its log."""

from satbench.server.logscan import failure_reason

LOG_MISSING_TENSOR = """0.00.003.100 I llama_model_loader: loaded meta data with 9 key-value pairs
0.00.004.000 E llama_model_load: error loading model: check_tensor_dims: tensor 'output_norm.weight' not found
0.00.004.048 E cmn  common_init_: failed to load model '/tmp/broken.gguf'
0.00.004.051 E srv    load_model: failed to load model, '/tmp/broken.gguf'
0.00.004.329 E srv          init: exiting due to model loading error
"""

LOG_ASSERT = """0.00.001.000 I load_tensors: loading model tensors
/src/llama-model.cpp:1234: GGML_ASSERT(hparams.n_expert_used > 0) failed
0.00.002.000 E something else failed
"""


def test_specific_error_beats_generic_ones():
    reason = failure_reason(LOG_MISSING_TENSOR)
    assert reason == ("llama_model_load: error loading model: "
                      "check_tensor_dims: tensor 'output_norm.weight' not found")


def test_an_assert_wins():
    assert "GGML_ASSERT(hparams.n_expert_used > 0)" in failure_reason(LOG_ASSERT)


def test_empty_log():
    assert failure_reason("") is None
