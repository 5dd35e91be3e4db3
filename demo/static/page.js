(...args) => {
  [...document.querySelectorAll('button[role=tab]')].find(b => b.innerText.trim() === TAB)?.click();
  args[args.length - 1] = Date.now();
  return args;
}
