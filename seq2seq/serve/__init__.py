"""`seq2seq-serve`: a LibreTranslate-compatible HTTP server over the inference wing. Never imports
`seq2seq.train`; imported only by its command (installed with `pip install -e ".[serve]"`).

settings.py (a request's decoding settings, validated by the config's rules, and how the engine is set
to them), engines.py (which engine decodes them, by seq2seq-translate's rules), attention.py (the page's
heat map), batcher.py (one worker thread owning the engine: concurrent requests gathered into one
length-sorted batch), requests.py (parsing and checking request bodies: the 400/413 answers), app.py
(the Starlette app: routes, API keys, the page), server.py (loading, binding, uvicorn, shutdown),
page.html (the page for people).
"""
