"use strict";
// Replace the sections with a fresh fragment every 2 s; a confirm()
// dialog blocks this script, so it never interrupts one.
setInterval(async () => {
  try {
    const r = await fetch("fragment", {cache: "no-store"});
    if (r.ok) document.getElementById("live").innerHTML = await r.text();
  } catch (e) {}
}, 2000);
// A form with data-confirm asks first; a confirmed purge says so to the
// server, which otherwise answers with a confirmation page of its own.
document.addEventListener("submit", (ev) => {
  const f = ev.target;
  const question = f.dataset.confirm;
  if (!question) return;
  if (!confirm(question)) { ev.preventDefault(); return; }
  const c = f.elements["confirm"];
  if (c) c.value = "yes";
});
