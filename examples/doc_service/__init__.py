"""A small document-QA web service: an uploaded file in, its text extracted, a question answered.

``examples.doc_service.app`` is the Starlette app (run it with uvicorn); ``examples.doc_service.qa``
holds the extraction and the answerers, and :func:`examples.doc_service.qa.answer_document` is the
same pipeline as a plain function (a ``python`` workflow entry).
"""
