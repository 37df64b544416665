"""Forty rewordings of one help-desk question, and other questions a help desk hears.

Measured with all-MiniLM-L6-v2 (docs/cache.md, "Choosing the threshold"):
against the first wording the other 39 score 0.802 to 0.994 (median 0.937);
the other questions score at most 0.745 against any of the forty
("How do I unlock my account?" against "How do I reset my account password?").
"""

REWORDINGS = [
    "How do I reset my password?",
    "How can I reset my password?",
    "How do I reset my password",
    "how do i reset my password",
    "What's the way to reset my password?",
    "How do I change my password?",
    "I forgot my password, how do I reset it?",
    "I forgot my password. How can I reset it?",
    "Can you tell me how to reset my password?",
    "Please tell me how to reset my password.",
    "What are the steps to reset my password?",
    "How would I go about resetting my password?",
    "How do I go about resetting my password?",
    "Steps for resetting my password?",
    "I need to reset my password. How?",
    "I need to reset my password, what do I do?",
    "Password reset: how do I do it?",
    "How to reset password?",
    "how to reset my password",
    "Reset my password — how?",
    "Where can I reset my password?",
    "How do I get a new password?",
    "I can't remember my password; how do I reset it?",
    "I lost my password. How do I reset it?",
    "What should I do to reset my password?",
    "What do I do if I need to reset my password?",
    "Could you explain how to reset my password?",
    "Can I reset my password? How?",
    "Is there a way to reset my password?",
    "How does one reset their password?",
    "How do you reset a password?",
    "How do I reset the password on my account?",
    "How do I reset my account password?",
    "How can I reset the password for my account?",
    "What is the procedure for resetting my password?",
    "How do I recover my password?",
    "My password doesn't work anymore, how do I reset it?",
    "Help me reset my password please",
    "I want to reset my password. How do I do that?",
    "Tell me how I can reset my password",
]

OTHER_QUESTIONS = [
    "How do I change my email address?",
    "How do I delete my account?",
    "What are your opening hours?",
    "How do I reset my router?",
    "Can I get a refund for my order?",
    "How do I enable two-factor authentication?",
    "Where can I download my invoices?",
    "How do I change my username?",
    "Why was my payment declined?",
    "How do I contact support?",
    "How do I update my phone number?",
    "How do I unlock my account?",
]
