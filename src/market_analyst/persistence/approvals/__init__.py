"""What an approval rests on: the approvers, their sign-in sessions and limits, the audit log."""
