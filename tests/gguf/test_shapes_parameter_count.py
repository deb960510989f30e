"""The parameter count the shapes table's comment states for deepseek2 64e is the one it builds."""

import inspect
import re

from satbench.gguf import shapes


def test_the_64e_comment_states_the_real_parameter_count():
    source = inspect.getsource(shapes)
    comment = source[:source.index("_DEEPSEEK2_64E = Dims(")].rsplit("# DeepSeek-V2-Lite", 1)[1]
    (stated,) = re.findall(r"([\d,]+) parameters", comment)
    assert int(stated.replace(",", "")) == shapes.parameter_count("deepseek2", "64e")
