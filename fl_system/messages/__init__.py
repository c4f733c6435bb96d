"""What the server and client halves send each other: record names and how models travel."""
