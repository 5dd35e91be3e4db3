() => {
  // On a phone or tablet (one column) the Settings start closed, so that Generate and the results follow the
  // model, prompt and method; one tap on "Settings" opens them.
  if (window.innerWidth <= NARROW_PX) {
    let tries = 0;
    const close = () => {
      const header = document.querySelector('#settings button.label-wrap');
      if (header) { if (header.classList.contains('open')) header.click(); return; }
      if (++tries < 100) setTimeout(close, 50);
    };
    close();
  }
  // Every picture named for a screen reader (Gradio wraps it, alt="", in a button without a
  // name): what it shows (the panel title above it) and where its run stands (the status of
  // its tab), renewed as the pictures and the statuses change.
  // A shipped picture (tiny and tiny-64 side by side) has no run: its title names it.
  const STATE = [['replay-', '#replay-text'], ['race-', '#race-status'], ['lossless-', '#lossless-status'],
                 ['frontier-', null], ['', '#status']];
  const firstLine = el => ((el && el.innerText) || '').trim().split('\n')[0].slice(0, 240);
  const titleOf = box => {
    for (let el = box.previousElementSibling; el; el = el.previousElementSibling)
      if (el.classList.contains('panel-title')) return firstLine(el);
    return box.id === 'replay-image' ? 'The replayed pass: committed tokens and the drafts verified' : 'A picture of the run';
  };
  const name = () => {
    for (const img of document.querySelectorAll('.bare img')) {
      const box = img.closest('.bare[id]');
      if (!box) continue;
      const title = titleOf(box);
      const status = STATE.find(([start]) => box.id.startsWith(start))[1];
      let state = status ? firstLine(document.querySelector(status)) : '';
      if (box.id.startsWith('race-'))      // a race's status: one part per method, this one's
        state = state.split(' · ').find(part => part.startsWith(title + ' ')) || state;
      const alt = title + (state ? '. ' + state : '');
      if (img.alt !== alt) img.alt = alt;
    }
  };
  // Every chart named too (role img): the one line its figure carries (layout.meta.alt, made
  // with it in demo/charts.py), what it shows now.
  const chartNames = () => {
    for (const plot of document.querySelectorAll('.js-plotly-plot')) {
      const alt = (plot.layout && plot.layout.meta && plot.layout.meta.alt) || '';
      if (alt && plot.getAttribute('aria-label') !== alt) {
        plot.setAttribute('role', 'img');
        plot.setAttribute('aria-label', alt);
      }
    }
  };
  // The replay's table of drafts: each cell carries its column's name, so that on a phone each
  // row reads as a card (page.css), as the race table does.
  const cellNames = () => {
    for (const table of document.querySelectorAll('#replay-text table')) {
      const heads = [...table.querySelectorAll('th')].map(th => th.textContent.trim());
      for (const row of table.querySelectorAll('tbody tr'))
        [...row.children].forEach((td, i) => { if (td.dataset.label !== heads[i]) td.dataset.label = heads[i]; });
    }
  };
  let due = null;
  new MutationObserver(() => { if (!due) due = setTimeout(() => { due = null; name(); chartNames(); cellNames(); quiet(); }, 150); })
    .observe(document.body, {subtree: true, childList: true, characterData: true, attributes: true, attributeFilter: ['src']});
  // Progress in words, in a polite live region of the page's own: a run's start, a step now
  // and then (STEP_MS apart at most), its end or stop, and a click refused. Each status carries
  // what to say in a hidden span (`.say-start`, `.say-step`, `.say-end`: demo.texts.said; a
  // hint's `.say-quiet`: nothing); another change of a status is said as its first line, where
  // its tab is in view.
  // Gradio's own region says "Loading" at every event and an untranslated key,
  // "common.complete", at its end: it is hidden from assistive technology.
  const STEP_MS = 6000;
  const SAID = ['#status', '#race-status', '#lossless-status', '#input-message', '#lossless-message'];
  const heard = {}, stepAt = {};
  let primed = false;
  const region = Object.assign(document.createElement('div'), {id: 'page-said', className: 'page-said'});
  region.setAttribute('role', 'status');          // in the page from the start: a region made as it speaks
  region.setAttribute('aria-live', 'polite');     // is not always heard
  region.setAttribute('aria-atomic', 'true');
  (document.querySelector('#header') || document.body).after(region);
  const speak = words => {
    if (region.textContent !== words) { region.textContent = words; return; }
    region.textContent = '';                      // the same words again (the same run twice): heard again
    setTimeout(() => { region.textContent = words; }, 100);
  };
  const quiet = () => {
    for (const el of document.querySelectorAll('.sr-only[aria-live]:not(#page-said)')) {
      el.removeAttribute('aria-live');
      el.removeAttribute('role');
      el.setAttribute('aria-hidden', 'true');
    }
  };
  const say = () => {
    for (const sel of SAID) {
      const box = document.querySelector(sel), md = box && box.querySelector('[data-testid=markdown]');
      if (!md) continue;
      const span = md.querySelector('[class*=say-]');
      const kind = span ? span.className.match(/say-(\w+)/)[1] : 'note';
      const words = (span ? span.textContent : md.textContent.trim().split('\n')[0]).trim()
        .replace(/ · /g, ', ').replace(/…$/, '');
      if (words === heard[sel]) continue;
      const first = !(sel in heard);
      heard[sel] = words;
      if (!primed || first || !words || kind === 'quiet') continue;    // a hint, or what a tab opens with
      if (kind === 'step' && Date.now() - (stepAt[sel] || 0) < STEP_MS) continue;
      if (kind === 'note' && !box.checkVisibility({visibilityProperty: true})) continue;    // a tab out of view
      if (kind !== 'end') stepAt[sel] = Date.now();
      speak(words);
    }
    primed = primed || !!document.querySelector('#status [data-testid=markdown]');
  };
  quiet();
  say();
  // Every status as it changes (a run's first status can be followed by the next within a
  // tenth of a second): a few text reads, no layout.
  new MutationObserver(say).observe(document.body, {subtree: true, childList: true, characterData: true});
  // The keyboard: a radio group is one Tab stop whose arrow keys change the choice (Gradio
  // names each radio apart, so each was a stop of its own); the tabs' arrow keys move to the
  // next tab; a dropdown's text is selected when it takes the focus, so that typing replaces
  // the name shown instead of adding to it.
  const group = () => {
    for (const set of document.querySelectorAll('fieldset[id]'))
      for (const radio of set.querySelectorAll('input[type=radio]'))
        if (radio.name !== 'radio-' + set.id) radio.name = 'radio-' + set.id;
  };
  group();
  new MutationObserver(group).observe(document.body, {subtree: true, childList: true, attributes: true, attributeFilter: ['name']});
  document.addEventListener('keydown', event => {
    const tab = event.target.closest && event.target.closest('[role=tab]');
    if (!tab || !['ArrowLeft', 'ArrowRight', 'Home', 'End'].includes(event.key)) return;
    const tabs = [...tab.parentElement.querySelectorAll('[role=tab]')].filter(t => t.offsetParent !== null);
    const at = tabs.indexOf(tab), last = tabs.length - 1;
    const next = tabs[{ArrowLeft: at ? at - 1 : last, ArrowRight: at < last ? at + 1 : 0, Home: 0, End: last}[event.key]];
    event.preventDefault();
    next.focus();
    next.click();
  });
  // A dropdown's list closes when the focus leaves it. Gradio's dropdown reads a key a tick after
  // it comes, by which time Tab has moved the focus on: it then opened the list again, filtered
  // to the value, and left it drawn over the next field. Tab means nothing else to a dropdown,
  // so it never reaches that handler; Escape and a click elsewhere close the list as they did.
  addEventListener('keydown', event => {
    if (event.key === 'Tab' && event.target.matches && event.target.matches('input[role=combobox]'))
      event.stopPropagation();
  }, true);
  document.addEventListener('focusin', event => {
    if (event.target.matches && event.target.matches('input[role=combobox]'))
      setTimeout(() => event.target.select(), 0);
  });
  // A link to tiny and tiny-64 side by side (under either model's note, in "How it works"):
  // the tab opens and the view comes into sight, its heading focused for the keyboard. The
  // tab's chart and pictures above it may still be drawing: it is kept at the top while they
  // grow, for two seconds at most or until the visitor scrolls.
  const STILL = ['wheel', 'touchstart', 'keydown'];
  document.addEventListener('click', event => {
    const link = event.target.closest && event.target.closest('a[href="#frontier"]');
    if (!link) return;
    event.preventDefault();
    document.querySelector('button[role=tab][data-tab-id="tab-explain"]')?.click();
    let tries = 0;
    const show = () => {
      const view = document.querySelector('#frontier'), heading = view && view.querySelector('h2');
      if (!heading || heading.offsetParent === null) { if (++tries < 100) setTimeout(show, 50); return; }
      heading.tabIndex = -1;
      heading.focus({preventScroll: true});
      const place = () => heading.scrollIntoView({block: 'start'});
      const keep = new ResizeObserver(place);
      const stop = () => { keep.disconnect(); STILL.forEach(e => removeEventListener(e, stop, true)); };
      keep.observe(heading.closest('.tabitem') || document.body);
      STILL.forEach(e => addEventListener(e, stop, true));
      setTimeout(stop, 2000);
      place();
    };
    show();
  });
  // A prompt clip the browser cannot play is refused beside its field, the field keeping its
  // label (Gradio would mark the whole box "Error"): said under it until another clip plays.
  const clipNote = () => {
    const box = document.querySelector('#prompt-clip');
    let note = document.querySelector('#clip-refused');
    if (box && !note) {
      note = Object.assign(document.createElement('p'), {id: 'clip-refused', className: 'clip-refused'});
      note.setAttribute('role', 'alert');
      box.after(note);
    }
    return note;
  };
  document.addEventListener('error', event => {
    if (!(event.target instanceof HTMLVideoElement) || !event.target.closest('#prompt-clip')) return;
    event.stopImmediatePropagation();
    const note = clipNote();
    if (note) note.textContent = UNPLAYABLE_CLIP;
  }, true);
  document.addEventListener('loadeddata', event => {
    if (event.target instanceof HTMLVideoElement && event.target.closest('#prompt-clip'))
      document.querySelector('#clip-refused')?.replaceChildren();
  }, true);
}
