() => {
  // On a phone or tablet (one column) the Settings start closed, so that Generate and the results follow the
  // model, prompt and method; one tap on "Settings" opens them.
  if (window.innerWidth > NARROW_PX) return;
  let tries = 0;
  const close = () => {
    const header = document.querySelector('#settings button.label-wrap');
    if (header) { if (header.classList.contains('open')) header.click(); return; }
    if (++tries < 100) setTimeout(close, 50);
  };
  close();
}
