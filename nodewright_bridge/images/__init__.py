"""Container images of the project: the controller image and the slim Python base it uses."""
