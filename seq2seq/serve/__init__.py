"""`seq2seq-serve`: a LibreTranslate-compatible HTTP server over the inference wing. Never imports
`seq2seq.train`; imported only by its command (installed with `pip install -e ".[serve]"`).

settings.py (a request's decoding settings, validated by the config's rules and the server's bounds,
and how the engine is set to them), engines.py (which engine decodes them, by seq2seq-translate's
rules), attention.py (the page's heat map), batcher.py (a model's concurrent requests
gathered into one length-sorted batch), engine_thread.py (the one thread that runs every model's
PyTorch work), requests.py (parameters from the query,
a form or JSON, checked: the 400/413 answers), languages.py (language names, routes to a model or
through a pivot, detection), sentences.py (sentence splitting), html_text.py (HTML's text nodes),
files.py (.txt, .html, .srt, .docx in and out), service.py (what the routes share: parameters, the
API key, texts to decoded lines and back, the drain after SIGTERM), libretranslate.py
(LibreTranslate's routes), native.py (/v1/translate and /v1/attention), spec.py (GET /spec), app.py
(the Starlette app: every route, /health, /v1/info, the page, errors as JSON, CORS), plan.py (what the
command builds: each model's decoding job, the server's bounds), command.py (serve(plan): loading, binding,
uvicorn, shutdown), page.html (the page).
"""
