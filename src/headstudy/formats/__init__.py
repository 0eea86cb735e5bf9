"""What stages hand each other: the resolved config files, the prepared data, the trained-model
folder, run names, and the writers of result files. A change here reruns every stage that
reads or writes that format."""
