// Passkey ceremonies for the enclave web shell. A first-party file: the
// pages load it with <script src> (the content security policy allows
// scripts from this origin only). Buttons carry their endpoints in data-*
// attributes; the server keeps every challenge.
"use strict";
(function () {
  function b64urlToBuf(s) {
    s = s.replace(/-/g, "+").replace(/_/g, "/");
    while (s.length % 4) s += "=";
    var bin = atob(s), out = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out.buffer;
  }
  function bufToB64url(buf) {
    var bytes = new Uint8Array(buf), bin = "";
    for (var i = 0; i < bytes.length; i++) bin += String.fromCharCode(bytes[i]);
    return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }
  function creationOptions(o) {
    var pk = o.publicKey;
    pk.challenge = b64urlToBuf(pk.challenge);
    pk.user.id = b64urlToBuf(pk.user.id);
    (pk.excludeCredentials || []).forEach(function (c) { c.id = b64urlToBuf(c.id); });
    return o;
  }
  function requestOptions(o) {
    var pk = o.publicKey;
    pk.challenge = b64urlToBuf(pk.challenge);
    (pk.allowCredentials || []).forEach(function (c) { c.id = b64urlToBuf(c.id); });
    return o;
  }
  function credentialJSON(c) {
    var r = c.response, out = {
      id: c.id, rawId: bufToB64url(c.rawId), type: c.type,
      clientExtensionResults: c.getClientExtensionResults ? c.getClientExtensionResults() : {},
      authenticatorAttachment: c.authenticatorAttachment || undefined,
      response: { clientDataJSON: bufToB64url(r.clientDataJSON) }
    };
    if (r.attestationObject) {
      out.response.attestationObject = bufToB64url(r.attestationObject);
      if (r.getTransports) out.response.transports = r.getTransports();
    } else {
      out.response.authenticatorData = bufToB64url(r.authenticatorData);
      out.response.signature = bufToB64url(r.signature);
      if (r.userHandle) out.response.userHandle = bufToB64url(r.userHandle);
    }
    return out;
  }
  function post(url, body) {
    return fetch(url, {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "Accept": "application/json" },
      body: JSON.stringify(body)
    }).then(function (res) {
      return res.json().catch(function () { return {}; }).then(function (j) {
        if (res.status === 429) throw new Error("Too many attempts from your network. Try again in a minute.");
        if (!res.ok) throw new Error(j.message || "The request failed.");
        return j;
      });
    });
  }
  // errorFor is where a button's failure is shown: the error line next
  // to it (a proof button in a form), else the page's passkey error.
  function errorFor(b) {
    var el = b && b.parentNode && b.parentNode.querySelector(".passkey-proof-error");
    return el || document.getElementById("passkey-error");
  }
  function showError(b, msg) {
    var el = errorFor(b);
    if (el) { el.textContent = msg; el.hidden = false; }
  }
  function go(url) { window.location.assign(url); }

  function bindButton(b, run) {
    if (!window.PublicKeyCredential) { b.disabled = true; showError(b, "This browser does not support passkeys."); return; }
    b.addEventListener("click", function () {
      b.disabled = true;
      run(b).catch(function (e) { showError(b, e && e.message ? e.message : "The passkey did not work."); })
        .finally(function () { b.disabled = false; });
    });
  }
  function bind(id, run) {
    var b = document.getElementById(id);
    if (b) bindButton(b, run);
  }

  // proveWithPasskey signs the server's challenge with one of the
  // account's passkeys: the proof of a factor an action asks for.
  // A button's data-token (a held link of an external sign-in) names what
  // the proof is for.
  function proveWithPasskey(optionsURL, token) {
    return post(optionsURL, token ? { token: token } : {}).then(function (c) {
      return navigator.credentials.get(requestOptions(c.options)).then(function (cred) {
        return { passkeyToken: c.token, passkeyCredential: credentialJSON(cred) };
      });
    });
  }

  // Register a new passkey (account security page). With a second factor
  // on the account it takes a code, or (left empty, when the account has
  // passkeys) one of the account's passkeys first.
  bind("passkey-add", function (b) {
    var name = (document.getElementById("passkey-name") || {}).value || "";
    var password = (document.getElementById("passkey-password") || {}).value || "";
    var code = ((document.getElementById("passkey-code") || {}).value || "").trim();
    var proof = (!code && b.dataset.proof) ? proveWithPasskey(b.dataset.proof) : Promise.resolve(code ? { code: code } : {});
    return proof.then(function (p) {
      p.password = password;
      return post(b.dataset.options, p);
    }).then(function (c) {
      return navigator.credentials.create(creationOptions(c.options)).then(function (cred) {
        return post(b.dataset.finish, { token: c.token, name: name, credential: credentialJSON(cred) });
      });
    }).then(function () { go(b.dataset.redirect); });
  });

  // A form that asks for a proof of a factor (new recovery codes, an
  // authenticator app beside a passkey, a workspace API key): its button
  // signs with a passkey, puts the assertion in the form's hidden fields
  // and submits the form.
  Array.prototype.forEach.call(document.querySelectorAll("button.passkey-proof"), function (b) {
    bindButton(b, function (b) {
      var form = b.form;
      if (!form.reportValidity()) return Promise.resolve();
      return proveWithPasskey(b.dataset.options, b.dataset.token).then(function (p) {
        form.elements.passkeyToken.value = p.passkeyToken;
        form.elements.passkeyCredential.value = JSON.stringify(p.passkeyCredential);
        form.submit();
      });
    });
  });

  // Sign in with a passkey instead of a password.
  bind("passkey-login", function (b) {
    return post(b.dataset.options, {}).then(function (c) {
      return navigator.credentials.get(requestOptions(c.options)).then(function (cred) {
        return post(b.dataset.finish, { token: c.token, credential: credentialJSON(cred), redirect: b.dataset.redirect });
      });
    }).then(function (j) { go(j.redirect); });
  });

  // A passkey as the second factor of a pending sign-in.
  bind("passkey-second-factor", function (b) {
    var pending = b.dataset.pending;
    return post(b.dataset.options, { pending: pending }).then(function (c) {
      return navigator.credentials.get(requestOptions(c.options)).then(function (cred) {
        return post(b.dataset.finish, { pending: pending, token: c.token, credential: credentialJSON(cred), redirect: b.dataset.redirect });
      });
    }).then(function (j) { go(j.redirect); });
  });
})();
