-- Workspace API keys die with the password, as sessions and OAuth grants
-- do: from now on a password change or reset (and every change of second
-- factors that signs an account out everywhere, which stamps
-- password_changed_at too) revokes the account's keys in its transaction.
-- Keys made before that rule, and before their account's last such change,
-- are revoked here, as of that change.
UPDATE workspace_api_keys
SET revoked_at = (SELECT u.password_changed_at FROM users AS u WHERE u.id = workspace_api_keys.user_id)
WHERE revoked_at IS NULL
  AND created_at <= (SELECT u.password_changed_at FROM users AS u WHERE u.id = workspace_api_keys.user_id);
