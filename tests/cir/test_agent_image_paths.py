"""The image files of agent calls, as the decode-ahead paths read them (inline bytes are not files)."""
from pathlib import Path

from unirag.cir.agent_runner import AgentJob
from unirag.cir.cache import CallRequest
from unirag.messages import ImagePart, Message, TextPart


def test_request_image_paths_lists_the_files_agent_calls_send_in_order():
    r = [CallRequest("k", [Message("user", [ImagePart(path=Path("/a.jpg")), TextPart("x"), ImagePart(data=b"x")])]),
         CallRequest("k2", [Message("user", [ImagePart(path=Path("b.png"))])])]
    assert AgentJob.image_paths(r) == ["/a.jpg", "b.png"]
