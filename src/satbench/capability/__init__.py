"""The node's capability report: recommendations checked against the model, build and machine of
this node now (`report`), asking a remote lane's server what it runs (`remote`)."""
