"""The Gradio page of scd_core (`demo.page`; app.py hands it to a Space): the library itself,
`scd_core`, holds no page, chart or Gradio code."""
