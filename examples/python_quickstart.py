"""stile from Python: sentence embeddings and their similarities (pip install . first)."""
import stile

model = stile.SentenceEncoder()  # the default model: ~/.cache/stile/all-MiniLM-L6-v2
sentences = ["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby."]
embeddings = model.encode(sentences)  # numpy, [3, 384], as SentenceTransformer.encode
print(embeddings.shape)
print(model.similarity(embeddings, embeddings).round(3))
