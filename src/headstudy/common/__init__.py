"""What every other package stands on: the user's error and the writers and readers of result
files. It imports nothing else of headstudy, so weights/, formats/, analysis/ and bookkeeping/
all import it and the package arrows run one way: common <- weights <- formats <- stages."""
