"""Search results: the Hit every index returns, and how hits are highlighted and presented."""
