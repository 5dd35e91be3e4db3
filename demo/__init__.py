"""The Gradio page of scd_core (app.py builds it from these modules): the library itself,
`scd_core`, holds no page, chart or Gradio code."""
