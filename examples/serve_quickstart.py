"""stile-serve with the openai client: start the server on the default model, ask it for embeddings, stop it."""
import os
import re
import subprocess

import openai

serve = os.environ.get("STILE_SERVE", "build/native/tools/stile-serve")
model = os.path.expanduser("~/.cache/stile/all-MiniLM-L6-v2")
server = subprocess.Popen([serve, "--model", model, "--port", "0"], stdout=subprocess.PIPE, text=True)
url = re.search(r"http://\S+/", server.stdout.readline()).group(0)  # "stile-serve: serving ... on http://..."

client = openai.OpenAI(base_url=url + "v1", api_key="unused")
r = client.embeddings.create(model="all-MiniLM-L6-v2", input=["A man is eating food.", "A man is eating bread."])
print(len(r.data), len(r.data[0].embedding), r.usage.total_tokens)  # 2 384 16

server.terminate()  # SIGTERM: the server answers what it accepted, then exits
server.wait()
