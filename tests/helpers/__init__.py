"""Shared pieces of the tests, as plain modules (no tests here, and no test module imports
another): tiny models and configs (models), transformers' counterparts (hf), exported bundles
(export), generated corpora (data), GLUE-layout files (glue), recipes' overrides (recipes), short
real pretraining runs (pretrain), Chinese sentiment files (chinese), BEIR folders (beir).
The fixtures that several test modules share are in conftest.py. Imported as `helpers.NAME`
(tests/ is on sys.path, as for conftest)."""
