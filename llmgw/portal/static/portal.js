// The portal's only shared script: copy buttons and confirmations. No inline handlers anywhere
// (the Content-Security-Policy forbids them); pages mark elements with data- attributes instead.
//   <button data-copy="#secret">Copy</button>       copies the text of the element #secret
//   <form data-confirm="Revoke this key?">           asks before the form is sent
"use strict";
document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const source = document.querySelector(button.dataset.copy);
  if (!source || !navigator.clipboard) return;
  const text = source.value !== undefined ? source.value : source.textContent;
  navigator.clipboard.writeText(text).then(() => {
    const label = button.textContent;
    button.textContent = button.dataset.copied || "✓";
    setTimeout(() => { button.textContent = label; }, 1500);
  });
});
document.addEventListener("submit", (event) => {
  const form = event.target.closest("form[data-confirm]");
  if (form && !window.confirm(form.dataset.confirm)) event.preventDefault();
});
