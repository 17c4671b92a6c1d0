"""
A first private logistic regression
===================================

placeholder
"""

import matplotlib.pyplot as plt

plt.plot([0, 1], [0, 1])
