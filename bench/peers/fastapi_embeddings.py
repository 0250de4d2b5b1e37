"""The serving peer: a FastAPI wrapper around sentence-transformers, serving OpenAI's /v1/embeddings
the way such wrappers are usually written (one model, encode per request in FastAPI's thread pool).

    .venv-ref/bin/python bench/peers/fastapi_embeddings.py MODEL_DIR PORT THREADS

It prints "ready" once the model is loaded and the port is open (bench/serve_bench.py waits for it).
"""
import sys

import torch
import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel
from sentence_transformers import SentenceTransformer

model_dir, port, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
model = SentenceTransformer(model_dir, device="cpu")
app = FastAPI()


class EmbeddingsRequest(BaseModel):
    input: str | list[str]
    model: str = ""


@app.post("/v1/embeddings")
def embeddings(request: EmbeddingsRequest):
    texts = [request.input] if isinstance(request.input, str) else request.input
    vectors = model.encode(texts, batch_size=32, convert_to_numpy=True)
    # usage is left at 0: counting the tokens would tokenize the texts a second time.
    return {"object": "list", "model": request.model,
            "data": [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)],
            "usage": {"prompt_tokens": 0, "total_tokens": 0}}


class Ready(uvicorn.Server):
    """Says "ready" once the socket is open (bench/serve_bench.py waits for it)."""

    async def startup(self, sockets=None):
        await super().startup(sockets)
        print("ready", flush=True)


Ready(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")).run()
