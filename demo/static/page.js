(...args) => {
  [...document.querySelectorAll('button[role=tab]')].find(b => b.innerText.trim() === TAB)?.click();
  if (window.innerWidth <= NARROW_PX)  // one column: Stop (or the Lossless button) at the top, the results under it
    document.querySelector(TARGET)?.scrollIntoView({block: 'start'});
  args[args.length - 1] = Date.now();
  return args;
}
