"""message_dp: a Message-API app with central DP (server-side fixed clipping) and Flower's accountant."""
